"""The Helm chart (deploy/helm/kairos), rendered by a real helm and checked offline.

`scripts/helm.sh` builds helm from its Go module once per machine. Each values file is linted
and rendered; every rendered manifest is validated against the Kubernetes API schemas that
kubernetes-validate ships, and the manifests are held to what Kairos itself demands: one
group (the same app id and partition count everywhere), no projection in the workers, probes
on the commands and routes the processes serve, secrets only by reference, and topics as
durable as KAIROS_ENV=prod requires. In CI (CI=true) a helm that cannot be built fails the
module; elsewhere it skips it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version
from pydantic import AliasChoices, SecretStr
from typer.main import get_command
from typer.testing import CliRunner

from kairos.cli import app as cli_app
from kairos.floor.settings import Environment, Settings, topic_durability_problem
from streams.topology import topic_specs

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "kairos"
VALUES = {
    "default": [],
    "production": [CHART / "values-production.yaml"],
}
RELEASE = "kairos"
# The first test on a machine builds helm (minutes); the rest take seconds.
pytestmark = pytest.mark.timeout(1500)
# The oldest Kubernetes the chart declares (Chart.yaml kubeVersion) and the newest known.
KUBERNETES_VERSIONS = ("1.25.0", latest_version())
# Custom resources: kubernetes-validate has no schema for them; their shape is asserted below.
CUSTOM_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("kafka.strimzi.io/v1beta2", "KafkaTopic"),
}
KAIROS_WORKLOADS = ("worker", "projector", "api")
IANA_SVC_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?")
DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


# --- helm ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def helm() -> str:
    """Path of the helm binary, built on first use; a failed build fails CI."""
    try:
        built = subprocess.run(
            ["bash", str(ROOT / "scripts" / "helm.sh")],
            capture_output=True,
            text=True,
            timeout=1200,
            check=True,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as error:
        output = getattr(error, "stderr", "") or ""
        message = f"scripts/helm.sh could not provide helm: {error}\n{output[-3000:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return built.stdout.strip().splitlines()[-1]


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, check=False
    )


def values_args(name: str) -> list[str]:
    return [arg for path in VALUES[name] for arg in ("-f", str(path))]


def render(helm: str, name: str, *extra: str) -> list[dict[str, Any]]:
    result = run_helm(helm, "template", RELEASE, str(CHART), *values_args(name), *extra)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def rendered(helm: str) -> dict[str, list[dict[str, Any]]]:
    return {name: render(helm, name) for name in VALUES}


@pytest.fixture(scope="module")
def production(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return rendered["production"]


# --- reading the manifests -----------------------------------------------------------------
def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def workload(docs: list[dict[str, Any]], component: str) -> dict[str, Any]:
    [found] = [
        doc
        for doc in docs
        if doc["kind"] in ("Deployment", "StatefulSet", "Job")
        and doc["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    return found


def container(doc: Mapping[str, Any]) -> dict[str, Any]:
    [only] = doc["spec"]["template"]["spec"]["containers"]
    return typing.cast(dict[str, Any], only)


def kairos_containers(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for component in (*KAIROS_WORKLOADS, "migration"):
        yield component, container(workload(docs, component))


def plain_env(item: Mapping[str, Any]) -> dict[str, str]:
    return {var["name"]: var["value"] for var in item.get("env", []) if "value" in var}


def secret_refs(item: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        var["name"]: (
            var["valueFrom"]["secretKeyRef"]["name"],
            var["valueFrom"]["secretKeyRef"]["key"],
        )
        for var in item.get("env", [])
        if "secretKeyRef" in var.get("valueFrom", {})
    }


def settings_env_names() -> set[str]:
    prefix = Settings.model_config.get("env_prefix", "")
    names: set[str] = set()
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(choice for choice in alias.choices if isinstance(choice, str))
        else:
            names.add(f"{prefix}{field_name}".upper())
    return names


def secret_env_names() -> set[str]:
    """Settings fields typed SecretStr, plus DATABASE_URL (it carries the password)."""
    prefix = Settings.model_config.get("env_prefix", "")
    return {"DATABASE_URL", "KAIROS_DATABASE_URL"} | {
        f"{prefix}{name}".upper()
        for name, field in Settings.model_fields.items()
        if field.annotation is SecretStr or SecretStr in typing.get_args(field.annotation)
    }


def settings_of(item: Mapping[str, Any], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The Settings a container builds, with stand-ins where the Secrets' values go."""
    for name in settings_env_names():
        monkeypatch.delenv(name, raising=False)
    for name, value in plain_env(item).items():
        monkeypatch.setenv(name, value)
    for name in secret_refs(item):
        stand_in = "postgresql://kairos:x@db/kairos" if "DATABASE_URL" in name else f"{name}-value"
        monkeypatch.setenv(name, stand_in)
    return Settings()


# --- helm lint and the Kubernetes schemas ---------------------------------------------------
@pytest.mark.parametrize("name", VALUES)
def test_chart_lints(helm: str, name: str) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART), *values_args(name))
    assert result.returncode == 0, result.stdout + result.stderr


def test_chart_app_version_is_the_project_version() -> None:
    import tomllib

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]


@pytest.mark.parametrize("name", VALUES)
def test_every_manifest_is_valid_for_kubernetes(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    docs = rendered[name]
    kinds = {d["kind"] for d in docs}
    assert {"StatefulSet", "Deployment", "Job", "Service", "PodDisruptionBudget"} <= kinds
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_KINDS:
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} on {version}: {error}")
        assert DNS_1123_SUBDOMAIN.fullmatch(doc["metadata"]["name"]), doc["metadata"]["name"]


def test_production_renders_the_custom_resources(production: list[dict[str, Any]]) -> None:
    kinds = {(doc["apiVersion"], doc["kind"]) for doc in production}
    assert CUSTOM_KINDS <= kinds
    for doc in production:
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_KINDS:
            assert DNS_1123_SUBDOMAIN.fullmatch(doc["metadata"]["name"]), doc["metadata"]
            assert isinstance(doc["spec"], dict) and doc["spec"]


def test_lint_fails_on_an_impossible_setting(helm: str) -> None:
    result = run_helm(
        helm, "template", RELEASE, str(CHART), "--set", "kafka.securityProtocol=SASL_TLS"
    )
    assert result.returncode != 0
    assert "kafka.securityProtocol" in result.stderr


# --- one group ------------------------------------------------------------------------------
def test_production_values_are_three_workers_over_sasl_ssl(
    production: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert workload(production, "worker")["spec"]["replicas"] == 3
    settings = settings_of(container(workload(production, "worker")), monkeypatch)
    assert settings.kafka_security_protocol.value == "SASL_SSL"
    assert settings.kafka_sasl_password is not None and settings.kafka_ssl_cafile is not None
    assert "DATABASE_URL" in secret_refs(container(workload(production, "worker")))


@pytest.mark.parametrize("name", VALUES)
def test_every_process_gets_the_same_app_id_partitions_and_topics(
    rendered: dict[str, list[dict[str, Any]]], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = {
        component: settings_of(item, monkeypatch)
        for component, item in kairos_containers(rendered[name])
    }
    shared = {(s.app_id, s.partitions, s.topic_prefix, s.env) for s in seen.values()}
    assert len(shared) == 1, {c: (s.app_id, s.partitions) for c, s in seen.items()}
    # Every replica of the one worker Deployment shares its pod template.
    assert workload(rendered[name], "worker")["kind"] == "StatefulSet"


@pytest.mark.parametrize("name", VALUES)
def test_each_worker_pod_joins_the_group_under_its_own_name(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    """Static membership: a pod replaced under its name takes its partitions back at once."""
    worker = workload(rendered[name], "worker")
    assert worker["kind"] == "StatefulSet"
    [instance] = [
        var for var in container(worker)["env"] if var["name"] == "KAIROS_GROUP_INSTANCE_ID"
    ]
    assert instance["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert "group_instance_id" in Settings.model_fields


@pytest.mark.parametrize("name", VALUES)
def test_projection_runs_in_the_projector_not_in_the_workers(
    rendered: dict[str, list[dict[str, Any]]], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = rendered[name]
    assert settings_of(container(workload(docs, "worker")), monkeypatch).projector_enabled is False
    projector = container(workload(docs, "projector"))
    assert projector["command"] == ["kairos", "projector"]
    assert settings_of(projector, monkeypatch).projector_enabled is True


@pytest.mark.parametrize("name", VALUES)
def test_every_kairos_variable_is_a_settings_field(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    for component, item in kairos_containers(rendered[name]):
        names = {var["name"] for var in item["env"]}
        unknown = names - settings_env_names()
        assert not unknown, f"{component} sets variables Settings ignores: {sorted(unknown)}"


@pytest.mark.parametrize(
    ("component", "expected"),
    [
        ("worker", ["kairos", "worker"]),
        ("projector", ["kairos", "projector"]),
        ("api", ["kairos", "api", "--host", "0.0.0.0", "--port", "8000"]),
        ("migration", ["kairos", "db", "migrate"]),
    ],
)
def test_command_is_a_real_cli_invocation(
    production: list[dict[str, Any]], component: str, expected: list[str]
) -> None:
    command = container(workload(production, component))["command"]
    assert command == expected
    result = CliRunner().invoke(cli_app, [*command[1:], "--help"])
    assert result.exit_code == 0, result.output


def test_migration_runs_before_install_and_upgrade(production: list[dict[str, Any]]) -> None:
    job = workload(production, "migration")
    hooks = set(job["metadata"]["annotations"]["helm.sh/hook"].split(","))
    assert hooks == {"pre-install", "pre-upgrade"}
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    # A pre-install hook runs before the release's own resources exist: it may use none.
    released = {
        (doc["kind"], doc["metadata"]["name"])
        for doc in production
        if "helm.sh/hook" not in doc["metadata"].get("annotations", {})
    }
    used = {("ServiceAccount", pod.get("serviceAccountName", "default"))}
    for volume in pod.get("volumes", []):
        if "configMap" in volume:
            used.add(("ConfigMap", volume["configMap"]["name"]))
        if "secret" in volume:
            used.add(("Secret", volume["secret"]["secretName"]))
    assert not used & released, (
        f"the hook needs what the release creates after it: {used & released}"
    )


# --- probes, shutdown, disruption, resources -------------------------------------------------
def port_of(item: Mapping[str, Any], port: int | str) -> int:
    """The container port a probe's `port` (a number or a port name) points at."""
    by_name = {p["name"]: p["containerPort"] for p in item["ports"]}
    if isinstance(port, int):
        return port
    # The schema takes any string here; Kubernetes wants an IANA service name it declares.
    assert IANA_SVC_NAME.fullmatch(port) and re.search("[a-z]", port), f"bad port {port!r}"
    assert port in by_name, f"probe port {port!r} is none of {sorted(by_name)}"
    return by_name[port]


@pytest.mark.parametrize("name", VALUES)
def test_probes_check_what_each_process_serves(
    rendered: dict[str, list[dict[str, Any]]], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.main import create_app

    docs = rendered[name]
    worker = container(workload(docs, "worker"))
    for probe in ("startupProbe", "livenessProbe"):
        command = worker[probe]["exec"]["command"]
        assert command[:2] == ["kairos", "worker-alive"], command
    assert "worker-alive" in get_command(cli_app).commands  # type: ignore[attr-defined]
    assert plain_env(worker)["KAIROS_WORKDIR"], "the probe reads the worker's own workdir"

    for component in ("worker", "projector"):
        item = container(workload(docs, component))
        settings = settings_of(item, monkeypatch)
        for probe in ("readinessProbe", "livenessProbe"):
            if "httpGet" not in item[probe]:
                continue
            get = item[probe]["httpGet"]
            assert get["path"] == "/healthz"
            assert port_of(item, get["port"]) == settings.metrics_port != 0
        assert settings.metrics_host == "0.0.0.0"

    api = container(workload(docs, "api"))
    routes = {getattr(route, "path", None) for route in create_app(Settings()).routes}
    served = int(api["command"][api["command"].index("--port") + 1])
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("readinessProbe", "livenessProbe"):
        get = api[probe]["httpGet"]
        assert get["path"] in routes
        assert port_of(api, get["port"]) == served


def test_an_upgrade_can_hold_the_workers_back_while_the_projector_rolls(helm: str) -> None:
    # docs/deploy.md, "Rolling upgrades": projectors no later than workers.
    docs = render(helm, "production", "--set", "image.tag=NEW", "--set", "worker.imageTag=OLD")
    images = {c: container(workload(docs, c))["image"].rsplit(":", 1)[1] for c in KAIROS_WORKLOADS}
    assert images == {"worker": "OLD", "projector": "NEW", "api": "NEW"}
    assert container(workload(docs, "migration"))["image"].endswith(":NEW")


def test_workers_have_time_to_leave_their_group(production: list[dict[str, Any]]) -> None:
    source = (ROOT / "streams" / "app.py").read_text()
    session_timeout = float(re.search(r"broker_session_timeout=([\d.]+)", source)[1])  # type: ignore[index]
    grace = workload(production, "worker")["spec"]["template"]["spec"]
    assert grace["terminationGracePeriodSeconds"] >= 2 * session_timeout
    # A StatefulSet's rolling update replaces one pod at a time, under the same name.
    assert workload(production, "worker")["spec"]["updateStrategy"] == {"type": "RollingUpdate"}


@pytest.mark.parametrize("name", VALUES)
def test_each_workload_has_a_disruption_budget_and_resources(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    docs = rendered[name]
    budgets = {
        doc["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]: doc["spec"]
        for doc in of_kind(docs, "PodDisruptionBudget")
    }
    for component in KAIROS_WORKLOADS:
        labels = workload(docs, component)["spec"]["template"]["metadata"]["labels"]
        assert budgets[component]["selector"]["matchLabels"].items() <= labels.items()
        assert budgets[component].get("maxUnavailable", 0) >= 1, "a budget must allow drains"
    for component, item in kairos_containers(docs):
        resources = item["resources"]
        assert resources["requests"]["cpu"] and resources["requests"]["memory"], component
        assert resources["limits"]["memory"], component
    assert container(workload(docs, "worker"))["resources"]["requests"]["cpu"] == "1"


# --- secrets --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", VALUES)
def test_no_secret_is_inlined(rendered: dict[str, list[dict[str, Any]]], name: str) -> None:
    docs = rendered[name]
    assert not of_kind(docs, "Secret"), "the chart references Secrets, it does not hold them"
    text = yaml.safe_dump_all(docs)
    assert not re.search(r"://[^/\s:@]+:[^/\s@]+@", text), "a URL with a password"
    for component, item in kairos_containers(docs):
        inlined = secret_env_names() & set(plain_env(item))
        assert not inlined, f"{component} inlines {sorted(inlined)}"
        assert {"DATABASE_URL", "KAIROS_TOKEN_SECRET"} <= set(secret_refs(item)), component


def test_sasl_password_and_tls_material_come_from_secrets(
    production: list[dict[str, Any]],
) -> None:
    for component, item in kairos_containers(production):
        refs = secret_refs(item)
        assert refs["KAIROS_KAFKA_SASL_PASSWORD"][0] == refs["KAIROS_KAFKA_SASL_USERNAME"][0]
        mounts = {m["mountPath"]: m["name"] for m in item["volumeMounts"]}
        cafile = plain_env(item)["KAIROS_KAFKA_SSL_CAFILE"]
        mount = str(Path(cafile).parent)
        pod = workload(production, component)["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes[mounts[mount]]["secret"]["secretName"], component


# --- durability -----------------------------------------------------------------------------
def test_production_topics_survive_a_lost_broker(
    production: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for component, item in kairos_containers(production):
        settings = settings_of(item, monkeypatch)
        assert settings.env is Environment.PROD, component
        assert topic_durability_problem(settings) is None, component
        assert (settings.replication_factor, settings.min_insync_replicas) == (3, 2), component


def test_prod_without_replication_does_not_render(helm: str) -> None:
    result = run_helm(helm, "template", RELEASE, str(CHART), "--set", "kairos.replicationFactor=1")
    assert result.returncode != 0
    assert "replicationFactor" in result.stderr


def test_strimzi_topics_are_the_topics_kairos_creates(
    production: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_of(container(workload(production, "worker")), monkeypatch)
    expected = {
        spec.name: (spec.partitions, "compact" if spec.compacted else "delete")
        for spec in topic_specs(settings)
    }
    topics = of_kind(production, "KafkaTopic")
    declared = {
        doc["spec"]["topicName"]: (
            doc["spec"]["partitions"],
            doc["spec"]["config"]["cleanup.policy"],
        )
        for doc in topics
    }
    assert declared == expected
    assert len({doc["metadata"]["name"] for doc in topics}) == len(topics)
    for doc in topics:
        assert doc["spec"]["replicas"] == settings.replication_factor
        assert doc["spec"]["config"]["min.insync.replicas"] == settings.min_insync_replicas
        assert doc["metadata"]["labels"]["strimzi.io/cluster"]


# --- monitoring -----------------------------------------------------------------------------
def test_dashboard_and_alerts_are_the_ones_under_deploy(production: list[dict[str, Any]]) -> None:
    [dashboard] = of_kind(production, "ConfigMap")
    shipped = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "kairos.json").read_text())
    assert json.loads(dashboard["data"]["kairos.json"]) == shipped
    [rule] = of_kind(production, "PrometheusRule")
    alerts = yaml.safe_load((ROOT / "deploy" / "alerts.yml").read_text())
    assert rule["spec"] == alerts


def test_service_monitor_names_jobs_as_the_alerts_expect(production: list[dict[str, Any]]) -> None:
    [monitor] = of_kind(production, "ServiceMonitor")
    job_label = monitor["spec"]["jobLabel"]
    jobs = {
        doc["metadata"]["labels"][job_label]: doc
        for doc in of_kind(production, "Service")
        if job_label in doc["metadata"]["labels"]
    }
    assert set(jobs) == {f"kairos-{component}" for component in KAIROS_WORKLOADS}
    scraped_ports = {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]}
    for job, service in jobs.items():
        assert {port["name"] for port in service["spec"]["ports"]} & scraped_ports, job


# --- values.yaml ----------------------------------------------------------------------------
# Keys whose value is a Kubernetes object passed through as it is; their parent is commented.
PASS_THROUGH = {
    "resources",
    "podSecurityContext",
    "containerSecurityContext",
    "startupProbe",
    "livenessProbe",
    "readinessProbe",
    "pdb",
    "labels",
}


@pytest.mark.parametrize("path", [CHART / "values.yaml", *VALUES["production"]], ids=str)
def test_every_values_key_is_commented(path: Path) -> None:
    lines = path.read_text().splitlines()
    stack: list[tuple[int, str]] = []
    uncommented = []
    for number, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z_][\w.-]*):", line)
        if not match:
            continue
        indent, key = len(match[1]), match[2]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        inside_object = any(parent in PASS_THROUGH for _, parent in stack)
        stack.append((indent, key))
        previous = next((lines[i] for i in range(number - 1, -1, -1) if lines[i].strip()), "")
        if not inside_object and not previous.lstrip().startswith("#"):
            uncommented.append(f"{number + 1}: {key}")
    assert not uncommented, f"keys without a comment in {path.name}: {uncommented}"
