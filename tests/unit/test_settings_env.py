"""A child process reads the settings its parent gave it: `Settings.to_env` is derived from the
model, so the bench, the tests and `kairos dev` cannot drift from it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import SecretStr, ValidationError

from kairos.floor.settings import Settings


def test_every_setting_comes_back_through_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    given = Settings(
        kafka_bootstrap_servers="broker:9093",
        database_url="postgresql://kairos@db/kairos",
        partitions=7,
        group_instance_id="worker-0",
        clock_origin=datetime(2030, 1, 1, tzinfo=UTC),
        clock_speed=60.0,
        projector_enabled=False,
        token_secrets=SecretStr("new,old"),
    )
    env = given.child_env({"PATH": "/bin", "KAIROS_PARTITIONS": "99", "DATABASE_URL": "stale"})

    assert env["PATH"] == "/bin" and env["KAIROS_PARTITIONS"] == "7"
    assert env["DATABASE_URL"] == "postgresql://kairos@db/kairos"
    assert "KAIROS_MIN_INSYNC_REPLICAS" not in env  # None stays unset
    for name in list(__import__("os").environ):
        if name.startswith("KAIROS_") or name in ("KAFKA_BOOTSTRAP_SERVERS", "DATABASE_URL"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert Settings() == given


def test_a_refused_value_is_not_echoed() -> None:
    """A settings error names the rule, never the values given: they may be secrets."""
    with pytest.raises(ValidationError) as raised:
        Settings.model_validate(
            {"token_secrets": "first-secret-value,second", "token_secret": "third-secret-value"}
        )
    assert "is not among KAIROS_TOKEN_SECRETS" in str(raised.value)
    assert "secret-value" not in str(raised.value)
