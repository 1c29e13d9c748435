"""The operator interface: clear failures, idempotent migrations, tokens on the last line."""

from __future__ import annotations

import subprocess
import time
from datetime import timedelta

import psycopg
import pytest

from kairos.floor.settings import Settings
from kairos.localstack.ports import free_port
from tests.support.stack import kairos_executable, settings_env

pytestmark = pytest.mark.integration


def run_kairos(settings: Settings, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*kairos_executable(), *args],
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("command", [["worker"], ["projector"], ["api"], ["db", "migrate"]])
def test_unreachable_dependency_gets_one_clear_line_and_a_nonzero_exit_quickly(
    settings: Settings, command: list[str]
) -> None:
    closed = f"127.0.0.1:{free_port()}"
    broken = settings.model_copy(
        update={
            "kafka_bootstrap_servers": closed
            if command[0] != "db"
            else settings.kafka_bootstrap_servers,
            "database_url": f"postgresql://postgres@{closed}/nowhere",
            "connect_timeout_seconds": 5.0,
        }
    )
    started = time.monotonic()
    result = run_kairos(broken, *command, timeout=30)
    took = time.monotonic() - started
    assert result.returncode == 2
    assert took < 15
    assert "Traceback" not in result.stderr + result.stdout
    [line] = [line for line in result.stderr.splitlines() if line.startswith("kairos:")]
    assert closed in line
    assert ("Kafka" in line) or ("PostgreSQL" in line)


def test_migrations_apply_once_and_token_is_the_last_line(settings: Settings) -> None:
    first = run_kairos(settings, "db", "migrate")
    second = run_kairos(settings, "db", "migrate")
    assert first.returncode == 0 and "applied: 001_read_model.sql" in first.stdout
    assert second.returncode == 0 and "current" in second.stdout

    created = run_kairos(settings, "token", "create", "--role", "SECURITY_ANALYST", "--name", "ci")
    assert created.returncode == 0
    token = created.stdout.strip().splitlines()[-1]
    assert token.startswith("kairos_") and " " not in token
    with psycopg.connect(settings.database_url) as conn:
        rows = conn.execute("SELECT name, role, token_hash FROM api_tokens").fetchall()
    assert [(name, role) for name, role, _ in rows] == [("ci", "SECURITY_ANALYST")]
    assert token not in rows[0][2], "tokens are stored hashed"

    revoked = run_kairos(settings, "token", "revoke", "--name", "ci")
    assert revoked.returncode == 0 and "revoked 1" in revoked.stdout
    refused = run_kairos(settings, "token", "create", "--role", "KING")
    assert refused.returncode == 2 and "unknown role" in refused.stderr


def test_token_with_a_ttl_expires_and_a_bad_ttl_is_refused(settings: Settings) -> None:
    created = run_kairos(settings, "token", "create", "--role", "GUEST", "--ttl", "30d")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip().splitlines()[-1]
    assert "expires 20" in created.stderr
    forever = run_kairos(settings, "token", "create", "--role", "GUEST", "--name", "forever")
    assert forever.returncode == 0 and "expires never" in forever.stderr
    with psycopg.connect(settings.database_url) as conn:
        rows = conn.execute(
            "SELECT name, expires_at - created_at FROM api_tokens ORDER BY created_at"
        ).fetchall()
    assert rows == [("cli", timedelta(days=30)), ("forever", None)]
    assert token.startswith("kairos_") and "." in token, "signed: body.signature"

    for bad in ("30", "30w", "-1d", "1.5h"):
        refused = run_kairos(settings, "token", "create", "--role", "GUEST", "--ttl", bad)
        assert refused.returncode == 2
        [line] = [line for line in refused.stderr.splitlines() if line.startswith("kairos:")]
        assert "s, m, h or d" in line


@pytest.mark.parametrize("command", ["worker", "projector", "api"])
def test_prod_with_unsafe_topics_refuses_to_start_with_one_line(
    settings: Settings, command: str
) -> None:
    closed = f"127.0.0.1:{free_port()}"
    prod = {
        **settings_env(settings),
        "KAIROS_ENV": "prod",
        "KAIROS_TOKEN_SECRET": "a-production-secret",
        "KAIROS_REPLICATION_FACTOR": "1",
        "KAFKA_BOOTSTRAP_SERVERS": closed,
        "KAIROS_CONNECT_TIMEOUT_SECONDS": "2",
    }

    def run(env: dict[str, str]) -> tuple[int, list[str]]:
        done = subprocess.run(
            [*kairos_executable(), command], env=env, capture_output=True, text=True, timeout=30
        )
        assert "Traceback" not in done.stderr + done.stdout
        return done.returncode, [ln for ln in done.stderr.splitlines() if ln.startswith("kairos:")]

    code, [line] = run(prod)
    assert code == 2
    assert line.startswith("kairos: KAIROS_ENV=prod refuses to start: KAIROS_REPLICATION_FACTOR")
    assert "KAIROS_ALLOW_UNSAFE_TOPICS=true" in line
    # With the override it goes on, and stops only at the (closed) Kafka address.
    code, [line] = run({**prod, "KAIROS_ALLOW_UNSAFE_TOPICS": "true"})
    assert code == 2 and closed in line and "refuses" not in line
