{{/* Names and labels. */}}
{{- define "kairos.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kairos.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kairos.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "kairos.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: include "kairos.selectorLabels" (list . "worker") */}}
{{- define "kairos.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "kairos.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "kairos.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kairos.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image of one component: include "kairos.image" (list . .Values.worker.imageTag) */}}
{{- define "kairos.image" -}}
{{- $root := index . 0 -}}
{{- $tag := index . 1 | default $root.Values.image.tag | default $root.Chart.AppVersion -}}
{{- printf "%s:%s" $root.Values.image.repository $tag -}}
{{- end -}}

{{- define "kairos.kafkaUsesSasl" -}}
{{- if has .Values.kafka.securityProtocol (list "SASL_PLAINTEXT" "SASL_SSL") }}true{{ end -}}
{{- end -}}

{{- define "kairos.kafkaUsesTls" -}}
{{- if has .Values.kafka.securityProtocol (list "SSL" "SASL_SSL") }}true{{ end -}}
{{- end -}}

{{/*
The environment every Kairos process gets: the same app id, partition count, topics and
durability everywhere. Secrets only ever by secretKeyRef.
*/}}
{{- define "kairos.env" -}}
{{- $k := .Values.kairos -}}
{{- if not (has .Values.kafka.securityProtocol (list "PLAINTEXT" "SSL" "SASL_PLAINTEXT" "SASL_SSL")) -}}
{{- fail (printf "kafka.securityProtocol must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, not %q" .Values.kafka.securityProtocol) -}}
{{- end -}}
{{- if and (eq (toString $k.env) "prod") (or (le (int $k.replicationFactor) 1) (not $k.minInsyncReplicas)) -}}
{{- fail "kairos.env=prod needs kairos.replicationFactor above 1 and kairos.minInsyncReplicas set" -}}
{{- end -}}
- name: KAIROS_ENV
  value: {{ $k.env | quote }}
- name: KAIROS_APP_ID
  value: {{ required "kairos.appId is required" $k.appId | quote }}
- name: KAIROS_PARTITIONS
  value: {{ $k.partitions | int | quote }}
- name: KAIROS_TOPIC_PREFIX
  value: {{ $k.topicPrefix | quote }}
- name: KAIROS_REPLICATION_FACTOR
  value: {{ $k.replicationFactor | int | quote }}
{{- if $k.minInsyncReplicas }}
- name: KAIROS_MIN_INSYNC_REPLICAS
  value: {{ $k.minInsyncReplicas | int | quote }}
{{- end }}
- name: KAIROS_CONNECT_TIMEOUT_SECONDS
  value: {{ $k.connectTimeoutSeconds | quote }}
- name: KAFKA_BOOTSTRAP_SERVERS
  value: {{ required "kafka.bootstrapServers is required" .Values.kafka.bootstrapServers | quote }}
- name: KAIROS_KAFKA_SECURITY_PROTOCOL
  value: {{ .Values.kafka.securityProtocol | quote }}
{{- if include "kairos.kafkaUsesSasl" . }}
- name: KAIROS_KAFKA_SASL_MECHANISM
  value: {{ .Values.kafka.sasl.mechanism | quote }}
- name: KAIROS_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ required "kafka.sasl.existingSecret is required for SASL" .Values.kafka.sasl.existingSecret }}
      key: {{ .Values.kafka.sasl.usernameKey }}
- name: KAIROS_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.kafka.sasl.existingSecret }}
      key: {{ .Values.kafka.sasl.passwordKey }}
{{- end }}
{{- if include "kairos.kafkaUsesTls" . }}
- name: KAIROS_KAFKA_SSL_CAFILE
  value: {{ printf "/etc/kairos/kafka-tls/%s" .Values.kafka.tls.caKey | quote }}
{{- if .Values.kafka.tls.certKey }}
- name: KAIROS_KAFKA_SSL_CERTFILE
  value: {{ printf "/etc/kairos/kafka-tls/%s" .Values.kafka.tls.certKey | quote }}
{{- end }}
{{- if .Values.kafka.tls.keyKey }}
- name: KAIROS_KAFKA_SSL_KEYFILE
  value: {{ printf "/etc/kairos/kafka-tls/%s" .Values.kafka.tls.keyKey | quote }}
{{- end }}
{{- end }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "database.existingSecret is required" .Values.database.existingSecret }}
      key: {{ .Values.database.urlKey }}
- name: KAIROS_TOKEN_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ required "tokenSecret.existingSecret is required" .Values.tokenSecret.existingSecret }}
      key: {{ .Values.tokenSecret.key }}
{{- with $k.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Volumes every Kairos pod mounts: a writable /tmp, and the Kafka TLS Secret if used. */}}
{{- define "kairos.volumes" -}}
- name: tmp
  emptyDir: {}
{{- if include "kairos.kafkaUsesTls" . }}
- name: kafka-tls
  secret:
    secretName: {{ required "kafka.tls.existingSecret is required for TLS" .Values.kafka.tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{- define "kairos.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if include "kairos.kafkaUsesTls" . }}
- name: kafka-tls
  mountPath: /etc/kairos/kafka-tls
  readOnly: true
{{- end }}
{{- end -}}

{{/*
Pod-level fields shared by every Kairos pod. The ServiceAccount is named by the workloads
only: the migration hook runs before the release's own resources exist.
*/}}
{{- define "kairos.podCommon" -}}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
The topics Kairos uses, as streams/topology.py's topic_specs declares them: a list of
{name, partitions, compacted}. tests/unit/test_helm_chart.py holds the two to one another.
*/}}
{{- define "kairos.topics" -}}
{{- $p := .Values.kairos.topicPrefix -}}
{{- $app := .Values.kairos.appId -}}
{{- $n := int .Values.kairos.partitions -}}
{{- $topics := list -}}
{{- range list "object-created" "schedule-changes" "scan-completed" "kairos-host-signals" "scan-commands" "kairos-schedule-runs" "dead-letters" "alerts" -}}
{{- $topics = append $topics (dict "name" (printf "%s%s" $p .) "partitions" $n "compacted" false) -}}
{{- end -}}
{{- $topics = append $topics (dict "name" (printf "%skairos-schedules" $p) "partitions" $n "compacted" true) -}}
{{- range list "kairos-dispatch-queue" "kairos-scheduler-control" -}}
{{- $topics = append $topics (dict "name" (printf "%s%s" $p .) "partitions" 1 "compacted" false) -}}
{{- end -}}
{{- range list "hosts" "schedules" "schedule-fanouts" "schedule-commands" -}}
{{- $topics = append $topics (dict "name" (printf "%s%s-%s-changelog" $p $app .) "partitions" $n "compacted" true) -}}
{{- end -}}
{{- $topics = append $topics (dict "name" (printf "%s%s-dispatcher-changelog" $p $app) "partitions" 1 "compacted" true) -}}
{{- $topics = append $topics (dict "name" (printf "%s%s-__assignor-__leader" $p $app) "partitions" 1 "compacted" false) -}}
{{- toJson $topics -}}
{{- end -}}
