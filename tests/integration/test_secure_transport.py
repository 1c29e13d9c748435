"""Kairos over secured transports: Apache Kafka with a SASL_SSL (SCRAM-SHA-512) listener and an
mTLS listener, PostgreSQL with TLS (verify-full) and scram-sha-256 passwords.

Certificates are made here with `openssl`. One broker serves both secured listeners (beside
the PLAINTEXT one it uses itself) and one PostgreSQL accepts only TLS connections with a
password; every test shares them. In each mode the worker, the projector, the CLI, the agent
SDK and the API connect through the secured listener, and a host published by the CLI is
scanned end to end. Wrong credentials and untrusted certificates end in one clear line.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kairos.agent import Agent, ScanCommand, ScanReport, ScanStatus
from kairos.floor.settings import Settings
from kairos.localstack.apache import ApacheKafkaCluster, KafkaListener
from kairos.localstack.postgres import LocalPostgres
from schemas.api import Role
from tests.integration.test_api import P, bearer, prepare, running_api
from tests.support.factories import host_created
from tests.support.stack import (
    KairosProcess,
    ProjectorProcess,
    WorkerProcess,
    chosen_broker,
    kairos_executable,
    settings_env,
    unique_name,
)
from tests.support.tls import (
    KEYSTORE_PASSWORD,
    CertificateAuthority,
    CertifiedKey,
    make_ca,
    openssl_available,
    pkcs12_keystore,
    postgres_with_tls,
)

pytestmark = pytest.mark.integration

SASL_USER = "kairos"
SASL_PASSWORD = "scram-secret-1"
PG_PASSWORD = "pg-secret-1"
MODES = ("sasl_ssl", "mtls")


@dataclass(frozen=True)
class Certificates:
    ca: CertificateAuthority
    foreign_ca: CertificateAuthority
    broker: CertifiedKey
    database: CertifiedKey
    client: CertifiedKey
    foreign_client: CertifiedKey


@dataclass(frozen=True)
class SecureStack:
    certs: Certificates
    kafka: ApacheKafkaCluster
    postgres: LocalPostgres


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    if not openssl_available():
        if os.environ.get("CI") == "true":  # CI installs it (scripts/setup.sh)
            pytest.fail("openssl is not installed")
        pytest.skip("openssl is not installed")
    directory = tmp_path_factory.mktemp("tls")
    ca = make_ca(directory / "ca")
    foreign = make_ca(directory / "foreign", name="Someone else's CA")
    return Certificates(
        ca=ca,
        foreign_ca=foreign,
        broker=ca.issue("broker", server=True),
        database=ca.issue("database", server=True),
        client=ca.issue("kairos-client", client=True),
        foreign_client=foreign.issue("kairos-client", client=True),
    )


@pytest.fixture(scope="module")
def stack(certs: Certificates, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    if chosen_broker() != "apache":
        pytest.skip("secured listeners are tested on Apache Kafka (KAIROS_TEST_BROKER=apache)")
    postgres_install = postgres_with_tls()
    if postgres_install is None:
        if os.environ.get("CI") == "true":  # CI installs it (scripts/setup.sh)
            pytest.fail("no PostgreSQL built with OpenSSL on PATH (Debian: postgresql-15)")
        pytest.skip("no PostgreSQL built with OpenSSL on PATH (Debian: postgresql-15)")
    keystore = pkcs12_keystore(certs.broker, certs.ca)
    tls = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": keystore,
        "ssl.keystore.password": KEYSTORE_PASSWORD,
        "ssl.key.password": KEYSTORE_PASSWORD,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": certs.ca.cert,
    }
    kafka = ApacheKafkaCluster(
        tmp_path_factory.mktemp("secure-kafka"),
        listeners=[
            KafkaListener(
                "SASL_SSL",
                "SASL_SSL",
                {
                    **tls,
                    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                    "scram-sha-512.sasl.jaas.config": (
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                    ),
                },
            ),
            KafkaListener("MTLS", "SSL", {**tls, "ssl.client.auth": "required"}),
        ],
        scram_users={SASL_USER: SASL_PASSWORD},
    )
    postgres = LocalPostgres(
        tmp_path_factory.mktemp("secure-postgres") / "data",
        fast=True,
        password=PG_PASSWORD,
        hba=[
            "local all all trust",
            "hostssl all all 127.0.0.1/32 scram-sha-256",
        ],
        tls=(certs.database.cert, certs.database.key),
        install_dir=postgres_install,
    )
    postgres.start()
    try:
        kafka.start()
        try:
            yield SecureStack(certs, kafka, postgres)
        finally:
            kafka.stop()
    finally:
        postgres.stop()


def database_url(stack: SecureStack, database: str, *, password: str = PG_PASSWORD) -> str:
    """A verify-full DSN: the server certificate must chain to the test CA and name 127.0.0.1."""
    return (
        f"postgresql://postgres:{password}@127.0.0.1:{stack.postgres.port}/{database}"
        f"?sslmode=verify-full&sslrootcert={stack.certs.ca.cert}"
    )


@pytest.fixture
def secure_settings(stack: SecureStack) -> Callable[..., Settings]:
    """Settings for ``mode`` on a fresh database, topic prefix and app id; overrides apply."""
    database = unique_name("kairos_")
    stack.postgres.create_database(database)

    def make(mode: str, **overrides: object) -> Settings:
        values: dict[str, object] = {
            "database_url": database_url(stack, database),
            "topic_prefix": f"{unique_name('s')}-",
            "app_id": unique_name("kairos"),
            "partitions": 2,
            "connect_timeout_seconds": 10.0,
            "tick_seconds": 0.05,
            "kafka_ssl_cafile": stack.certs.ca.cert,
        }
        if mode == "sasl_ssl":
            values |= {
                "kafka_bootstrap_servers": stack.kafka.listener_servers("SASL_SSL"),
                "kafka_security_protocol": "SASL_SSL",
                "kafka_sasl_mechanism": "SCRAM-SHA-512",
                "kafka_sasl_username": SASL_USER,
                "kafka_sasl_password": SASL_PASSWORD,
            }
        else:
            values |= {
                "kafka_bootstrap_servers": stack.kafka.listener_servers("MTLS"),
                "kafka_security_protocol": "SSL",
                "kafka_ssl_certfile": stack.certs.client.cert,
                "kafka_ssl_keyfile": stack.certs.client.key,
            }
        values.update(overrides)
        return Settings.model_validate(values)

    return make


def secure_env(settings: Settings) -> dict[str, str]:
    """The environment a `kairos` process gets: the usual one plus the security settings."""
    env = settings_env(settings)
    env["KAIROS_KAFKA_SECURITY_PROTOCOL"] = settings.kafka_security_protocol.value
    env["KAIROS_KAFKA_SASL_MECHANISM"] = settings.kafka_sasl_mechanism
    password = settings.kafka_sasl_password
    optional = {
        "KAIROS_KAFKA_SASL_USERNAME": settings.kafka_sasl_username,
        "KAIROS_KAFKA_SASL_PASSWORD": password.get_secret_value() if password else None,
        "KAIROS_KAFKA_SSL_CAFILE": settings.kafka_ssl_cafile,
        "KAIROS_KAFKA_SSL_CERTFILE": settings.kafka_ssl_certfile,
        "KAIROS_KAFKA_SSL_KEYFILE": settings.kafka_ssl_keyfile,
    }
    env.update({key: str(value) for key, value in optional.items() if value is not None})
    return env


def run_kairos(
    settings: Settings, *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*kairos_executable(), *args],
        env=secure_env(settings),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Callable[..., KairosProcess]]:
    """Starts `kairos worker` / `kairos projector` with the security settings; all stopped after."""
    started: list[KairosProcess] = []

    def launch(kind: type[KairosProcess], settings: Settings, *args: str) -> KairosProcess:
        log_path = tmp_path / f"{kind.role}-{len(started)}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [*kairos_executable(), kind.role, *args],
                env=secure_env(settings),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started.append(kind(process, log_path))
        return started[-1]

    yield launch
    for process in started:
        process.stop()


def one_clear_line(result: subprocess.CompletedProcess[str]) -> str:
    """The process exited 2 with exactly one `kairos:` line and no traceback; that line."""
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output, output
    lines = [line for line in result.stderr.splitlines() if line.startswith("kairos:")]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize("mode", MODES)
async def test_a_host_is_scanned_end_to_end_over_the_secured_transports(
    mode: str, secure_settings: Callable[..., Settings], processes, tmp_path: Path
) -> None:
    settings = secure_settings(mode)
    tokens = await prepare(settings)  # topics, migrations and tokens over TLS on both sides
    worker = processes(
        WorkerProcess,
        settings.model_copy(update={"projector_enabled": False}),
        "--workdir",
        str(tmp_path / "worker"),
    )
    projector = processes(ProjectorProcess, settings)
    tail = subprocess.Popen(
        [*kairos_executable(), "commands", "tail", "--from-beginning", "--json"]
        + ["--max", "1", "--timeout", "90"],
        env=secure_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    answered: list[ScanCommand] = []

    async def scan(command: ScanCommand) -> ScanReport:
        answered.append(command)
        return ScanReport(status=ScanStatus.SUCCEEDED, score=87, passed=87, failed=13)

    try:
        worker.wait_ready()
        projector.wait_ready()
        async with Agent(settings, scan), running_api(settings) as client:
            host = f"secure-{mode}"
            published = run_kairos(
                settings,
                "events",
                "publish",
                "object-created",
                "-",
                stdin=host_created(host).model_dump_json(),
            )
            assert published.returncode == 0, published.stderr
            assert f"published to object-created (key {host})" in published.stdout
            guest = bearer(tokens[Role.GUEST])
            deadline = time.monotonic() + 60
            while True:
                response = await client.get(f"{P}/hosts/{host}", headers=guest)
                # The scan and the host state it led to reach the read model separately.
                body = response.json() if response.status_code == 200 else {}
                if body.get("latest_scan") and body.get("last_scan_completed"):
                    break
                assert time.monotonic() < deadline, f"{response.status_code} {response.text}"
                await asyncio.sleep(0.2)
        detail = response.json()
        out, err = tail.communicate(timeout=60)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()

    assert tail.returncode == 0, err
    [printed] = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert printed["host_id"] == host
    scan = detail["latest_scan"]
    assert answered and str(answered[0].command_id) == printed["command_id"] == scan["command_id"]
    assert scan["status"] == "succeeded" and scan["matched"] and scan["score"] == 87
    assert detail["score"] == 87 and detail["last_scan_completed"] is not None
    for process in (worker, projector):
        assert process.process.poll() is None, process.log()[-3000:]


@pytest.mark.parametrize(
    ("mode", "overrides", "expected"),
    [
        pytest.param(
            "sasl_ssl",
            {"kafka_sasl_password": "not-the-password"},
            "SASL authentication failed for user 'kairos' with SCRAM-SHA-512",
            id="wrong-password",
        ),
        pytest.param(
            "sasl_ssl",
            {"kafka_ssl_cafile": "foreign_ca"},
            "TLS: the broker's certificate is not trusted",
            id="untrusted-broker-certificate",
        ),
        pytest.param(
            "mtls",
            {"kafka_ssl_certfile": "foreign_client", "kafka_ssl_keyfile": "foreign_client"},
            "TLS: the broker refused this client's certificate",
            id="client-certificate-of-another-ca",
        ),
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        ["events", "publish", "object-created", "-"],
        ["commands", "tail", "--timeout", "5"],
        ["worker"],
        ["projector"],
    ],
    ids=["events-publish", "commands-tail", "worker", "projector"],
)
def test_a_refused_credential_is_one_clear_line_and_exit_2(
    mode: str,
    overrides: dict[str, str],
    expected: str,
    command: list[str],
    secure_settings: Callable[..., Settings],
    stack: SecureStack,
    tmp_path: Path,
) -> None:
    files = {
        "foreign_ca": stack.certs.foreign_ca.cert,
        "foreign_client": stack.certs.foreign_client,
    }
    resolved: dict[str, object] = {}
    for key, value in overrides.items():
        chosen = files.get(value, value)
        if isinstance(chosen, CertifiedKey):
            chosen = chosen.cert if key.endswith("certfile") else chosen.key
        resolved[key] = chosen
    settings = secure_settings(mode, connect_timeout_seconds=5.0, **resolved)
    if command == ["worker"]:
        command = ["worker", "--workdir", str(tmp_path / "worker")]
    started = time.monotonic()
    result = run_kairos(
        settings, *command, stdin=host_created("refused").model_dump_json(), timeout=60
    )
    took = time.monotonic() - started
    line = one_clear_line(result)
    assert expected in line, line
    assert settings.kafka_bootstrap_servers in line
    if command[0] in ("events", "commands"):  # processes log; the CLI says that line alone
        assert result.stderr.strip().splitlines() == [line], result.stderr
    assert "not-the-password" not in result.stdout + result.stderr
    assert took < 30


def test_postgres_refuses_a_wrong_password_and_a_connection_without_tls(
    secure_settings: Callable[..., Settings], stack: SecureStack, tmp_path: Path
) -> None:
    good = secure_settings("sasl_ssl", connect_timeout_seconds=5.0)
    database = good.database_url.split("/")[-1].split("?")[0]
    wrong = good.model_copy(
        update={"database_url": database_url(stack, database, password="not-the-password")}
    )
    for command in (["projector"], ["db", "migrate"]):
        line = one_clear_line(run_kairos(wrong, *command))
        assert "password authentication failed" in line, line
        assert "not-the-password" not in line
    plain = good.model_copy(
        update={
            "database_url": (
                f"postgresql://postgres:{PG_PASSWORD}@127.0.0.1:{stack.postgres.port}/{database}"
                "?sslmode=disable"
            )
        }
    )
    line = one_clear_line(run_kairos(plain, "db", "migrate"))
    assert "no encryption" in line, line
    untrusting = good.model_copy(
        update={
            "database_url": good.database_url.replace(
                str(stack.certs.ca.cert), str(stack.certs.foreign_ca.cert)
            )
        }
    )
    line = one_clear_line(run_kairos(untrusting, "db", "migrate"))
    assert "certificate verify failed" in line, line
    migrated = run_kairos(good, "db", "migrate")
    assert migrated.returncode == 0, migrated.stderr
