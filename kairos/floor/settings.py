"""Settings shared by the worker, the API and the CLI, read from the environment."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from datetime import datetime
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, AwareDatetime, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.topics import TopicNames


class Environment(StrEnum):
    DEV = "dev"
    PROD = "prod"


class KafkaSecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


DEV_TOKEN_SECRET = "kairos-dev-secret-change-me"


def split_token_secrets(text: str) -> tuple[str, ...]:
    """`new,old` as its secrets in order; blanks around commas and empty entries dropped."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return str(value.value)
    return _plain(value)


def _plain(value: Any) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else str(value)


class Settings(BaseSettings):
    """Every knob of a Kairos process. Env names are given in `docs` and the README."""

    model_config = SettingsConfigDict(
        env_prefix="KAIROS_",
        extra="ignore",
        frozen=True,
        populate_by_name=True,
        # A refused value is not echoed: it may be a password or a token secret.
        hide_input_in_errors=True,
    )

    env: Environment = Field(default=Environment.DEV, description="dev or prod.")
    kafka_bootstrap_servers: str = Field(
        default="127.0.0.1:9092",
        validation_alias=AliasChoices("KAFKA_BOOTSTRAP_SERVERS", "KAIROS_KAFKA_BOOTSTRAP_SERVERS"),
        description="Comma-separated host:port list of Kafka brokers.",
    )
    kafka_security_protocol: KafkaSecurityProtocol = Field(
        default=KafkaSecurityProtocol.PLAINTEXT, description="Kafka listener protocol."
    )
    kafka_sasl_mechanism: str = Field(
        default="SCRAM-SHA-512", description="SASL mechanism (SCRAM-SHA-256/512 or PLAIN)."
    )
    kafka_sasl_username: str | None = Field(default=None, description="SASL user name.")
    kafka_sasl_password: SecretStr | None = Field(default=None, description="SASL password.")
    kafka_ssl_cafile: Path | None = Field(default=None, description="CA bundle for Kafka TLS.")
    kafka_ssl_certfile: Path | None = Field(default=None, description="Client certificate.")
    kafka_ssl_keyfile: Path | None = Field(default=None, description="Client private key.")
    kafka_idempotence: bool = Field(
        default=True, description="Idempotent producers (turn off for brokers without it)."
    )
    database_url: str = Field(
        default="postgresql://postgres@127.0.0.1:5432/kairos",
        validation_alias=AliasChoices("DATABASE_URL", "KAIROS_DATABASE_URL"),
        description="PostgreSQL DSN of the read model.",
    )
    topic_prefix: str = Field(default="", description="Prepended to every topic name.")
    app_id: str = Field(default="kairos", description="Consumer group / Faust app id.")
    partitions: int = Field(default=12, ge=1, le=1024, description="Partitions of host topics.")
    group_instance_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=249,
        description="Static group membership: a stable id per worker (a StatefulSet pod's"
        " name). A worker started again under the same id takes its partitions back at once,"
        " with no rebalance and no wait for the session timeout; a worker that stops leaves"
        " its partitions unassigned until that timeout. Unset: dynamic membership.",
    )
    replication_factor: int = Field(
        default=1, ge=1, le=5, description="Replication factor of every topic Kairos creates."
    )
    min_insync_replicas: int | None = Field(
        default=None, ge=1, le=5, description="min.insync.replicas for created topics."
    )
    allow_unsafe_topics: bool = Field(
        default=False,
        description="Let env=prod start with replication factor 1 or no min.insync.replicas "
        "(topics that lose acknowledged events when one broker is lost).",
    )
    clock_speed: float = Field(
        default=1.0, gt=0, description="Scheduler time speed-up, for demos and simulations."
    )
    clock_origin: AwareDatetime | None = Field(
        default=None,
        description="Wall instant a sped-up clock counts from; give workers the same one.",
    )
    clock_start: AwareDatetime | None = Field(
        default=None,
        description="Scheduler time shown at clock_origin (default: clock_origin itself).",
    )
    tick_seconds: float = Field(
        default=0.1,
        gt=0,
        le=5,
        description="The longest wall time between two looks at what is due (a wake-up that "
        "falls due sooner is looked at when it does).",
    )
    alert_check_seconds: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="How often the projector checks the time-based alerts (past the promise, "
        "cap saturated).",
    )
    connect_timeout_seconds: float = Field(
        default=10.0, gt=0, le=120, description="Give up reaching Kafka/PostgreSQL after this."
    )
    projector_enabled: bool = Field(
        default=True, description="Run the PostgreSQL projector inside each worker."
    )
    producer_linger_ms: float = Field(
        default=5.0,
        ge=0,
        le=1000,
        description="How long the worker's producer waits to fill a batch before sending.",
    )
    consumer_fetch_bytes: int = Field(
        default=256 * 1024,
        ge=64 * 1024,
        le=64 * 1024 * 1024,
        description="How much a worker's consumer fetches from one partition at a time: what"
        " one poll holds in memory (a larger record still comes whole).",
    )
    fault_offset_fetch_delay_seconds: float = Field(
        default=0.0,
        ge=0,
        le=10,
        description="Fault injection for tests: delay each committed-offset look-up.",
    )
    fault_command_send_delay_seconds: float = Field(
        default=0.0,
        ge=0,
        le=60,
        description="Fault injection for tests: hold commands after their slots are durable.",
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="Bind address of the worker's /metrics and /healthz."
    )
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of the worker's (or projector's) /metrics and /healthz; 0 serves none.",
    )
    workdir: Path = Field(default=Path(".kairos/worker"), description="Worker's local data.")
    api_host: str = Field(default="127.0.0.1", description="API bind address.")
    api_port: int = Field(default=8000, ge=1, le=65535, description="API port.")
    token_secret: SecretStr = Field(
        default=SecretStr(DEV_TOKEN_SECRET),
        description="Secret that signs API tokens; changing it invalidates every token "
        "(rotate with KAIROS_TOKEN_SECRETS instead).",
    )
    token_secrets: SecretStr | None = Field(
        default=None,
        description="Comma-separated token secrets, newest first: tokens signed by any are "
        "accepted, new ones are signed by the first. Set, it replaces KAIROS_TOKEN_SECRET, "
        "which must then be one of them.",
    )
    api_token_cache_seconds: float = Field(
        default=30.0,
        ge=0,
        le=300,
        description="How long the API trusts a token it looked up in the database; a "
        "revocation takes effect within this time (0: look tokens up on every request).",
    )
    api_max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        le=64 * 1024 * 1024,
        description="Largest request body the API reads; a longer one is answered 413.",
    )

    @model_validator(mode="before")
    @classmethod
    def _sign_with_the_newest_token_secret(cls, data: Any) -> Any:
        """With KAIROS_TOKEN_SECRETS, `token_secret` is its first secret, so whatever signs
        a token signs with the newest."""
        if not isinstance(data, dict) or not _plain(data.get("token_secrets") or "").strip():
            return data  # Unset or empty (as compose passes an unset variable): not in use.
        listed = split_token_secrets(_plain(data["token_secrets"]))
        if not listed:
            raise ValueError("KAIROS_TOKEN_SECRETS names no secret")
        single = data.get("token_secret")
        if single is not None and _plain(single) not in listed:
            raise ValueError(
                "KAIROS_TOKEN_SECRET is not among KAIROS_TOKEN_SECRETS: list it or unset it"
            )
        return {**data, "token_secret": listed[0]}

    @model_validator(mode="after")
    def _refuse_default_secret_outside_dev(self) -> Settings:
        if self.env is Environment.PROD:
            if DEV_TOKEN_SECRET in self.token_secret_values():
                raise ValueError("KAIROS_TOKEN_SECRET(S) must be set outside dev")
        return self

    def token_secret_values(self) -> tuple[str, ...]:
        """Every secret a token may be signed with, the signing one first."""
        listed = self.token_secrets.get_secret_value() if self.token_secrets else ""
        return split_token_secrets(listed) or (self.token_secret.get_secret_value(),)

    def to_env(self) -> dict[str, str]:
        """The environment that gives a child process these settings: every field, under
        the name it is read from (KAIROS_ and the field's name; the first alias where it has
        one); a field that is None is left out, so it stays unset."""
        env: dict[str, str] = {}
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if value is None:
                continue
            alias = field.validation_alias
            key = (
                str(alias.choices[0])
                if isinstance(alias, AliasChoices)
                else f"KAIROS_{name.upper()}"
            )
            env[key] = _env_value(value)
        return env

    def child_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` (a process environment) with every Kairos setting in it replaced by these:
        what a worker, projector or API started as a child process reads."""
        names = {"KAFKA_BOOTSTRAP_SERVERS", "DATABASE_URL"}
        env = {
            key: value
            for key, value in base.items()
            if not key.startswith("KAIROS_") and key not in names
        }
        return {**env, **self.to_env(), "PYTHONUNBUFFERED": "1"}

    @property
    def topics(self) -> TopicNames:
        return TopicNames(self.topic_prefix)

    def kafka_client_options(self) -> dict[str, Any]:
        """Security options for every aiokafka client (TLS and SASL pass straight through)."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.kafka_bootstrap_servers,
            "security_protocol": self.kafka_security_protocol.value,
        }
        if self.kafka_security_protocol in (
            KafkaSecurityProtocol.SSL,
            KafkaSecurityProtocol.SASL_SSL,
        ):
            options["ssl_context"] = self.ssl_context()
        if self.kafka_security_protocol in (
            KafkaSecurityProtocol.SASL_PLAINTEXT,
            KafkaSecurityProtocol.SASL_SSL,
        ):
            options["sasl_mechanism"] = self.kafka_sasl_mechanism
            options["sasl_plain_username"] = self.kafka_sasl_username
            options["sasl_plain_password"] = (
                self.kafka_sasl_password.get_secret_value() if self.kafka_sasl_password else None
            )
        return options

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(
            cafile=str(self.kafka_ssl_cafile) if self.kafka_ssl_cafile else None
        )
        if self.kafka_ssl_certfile:
            context.load_cert_chain(
                str(self.kafka_ssl_certfile),
                str(self.kafka_ssl_keyfile) if self.kafka_ssl_keyfile else None,
            )
        return context


def topic_durability_problem(settings: Settings) -> str | None:
    """Why `settings` must not start in prod, or None.

    In prod the topics Kairos creates must survive the loss of a broker without losing an
    acknowledged event: replication factor above 1 and min.insync.replicas set (acks=all
    alone waits for every *in-sync* replica, which may be just the leader).
    """
    if settings.env is not Environment.PROD or settings.allow_unsafe_topics:
        return None
    wrong = []
    if settings.replication_factor == 1:
        wrong.append("KAIROS_REPLICATION_FACTOR is 1")
    if settings.min_insync_replicas is None:
        wrong.append("KAIROS_MIN_INSYNC_REPLICAS is unset")
    if not wrong:
        return None
    return (
        f"KAIROS_ENV=prod refuses to start: {' and '.join(wrong)}, so the topics Kairos "
        "creates would lose acknowledged events with one broker; set "
        "KAIROS_REPLICATION_FACTOR=3 and KAIROS_MIN_INSYNC_REPLICAS=2, or "
        "KAIROS_ALLOW_UNSAFE_TOPICS=true to run anyway"
    )
