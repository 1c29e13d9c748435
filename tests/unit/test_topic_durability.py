"""KAIROS_ENV=prod refuses topics that would lose acknowledged events: the pure check, and
one clear line from every command that starts a Kairos process."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kairos.cli import app as cli_app
from kairos.floor.settings import Environment, Settings, topic_durability_problem

PROD = {"env": Environment.PROD, "token_secret": "a-real-secret"}


def settings(**values: object) -> Settings:
    return Settings.model_validate({**PROD, **values})


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"replication_factor": 1, "min_insync_replicas": 1}, ["KAIROS_REPLICATION_FACTOR is 1"]),
        ({"replication_factor": 3}, ["KAIROS_MIN_INSYNC_REPLICAS is unset"]),
        ({}, ["KAIROS_REPLICATION_FACTOR is 1", "KAIROS_MIN_INSYNC_REPLICAS is unset"]),
    ],
)
def test_prod_refuses_one_replica_or_unset_min_insync_replicas(
    values: dict[str, object], named: list[str]
) -> None:
    problem = topic_durability_problem(settings(**values))
    assert problem is not None and "\n" not in problem
    for part in named:
        assert part in problem
    assert "KAIROS_ALLOW_UNSAFE_TOPICS=true" in problem  # how to override
    assert "lose acknowledged events" in problem  # why


def test_prod_with_replicated_topics_or_the_override_starts() -> None:
    assert topic_durability_problem(settings(replication_factor=3, min_insync_replicas=2)) is None
    assert topic_durability_problem(settings(allow_unsafe_topics=True)) is None


def test_dev_is_not_checked() -> None:
    assert topic_durability_problem(Settings(env=Environment.DEV)) is None


@pytest.mark.parametrize("command", [["worker"], ["projector"], ["api"]])
def test_every_process_refuses_with_one_line_before_reaching_kafka(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "KAIROS_ENV": "prod",
        "KAIROS_TOKEN_SECRET": "a-real-secret",
        "KAIROS_REPLICATION_FACTOR": "1",
        # Nothing listens here: a process that went on would fail differently.
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9",
        "KAIROS_CONNECT_TIMEOUT_SECONDS": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KAIROS_MIN_INSYNC_REPLICAS", raising=False)
    monkeypatch.delenv("KAIROS_ALLOW_UNSAFE_TOPICS", raising=False)
    result = CliRunner().invoke(cli_app, command)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.startswith("kairos:")]
    assert len(lines) == 1
    assert "KAIROS_ENV=prod refuses to start" in lines[0]
    assert "Traceback" not in result.output


def test_the_api_app_refuses_unsafe_prod_settings_too() -> None:
    from api.main import create_app

    with pytest.raises(ValueError, match="KAIROS_ALLOW_UNSAFE_TOPICS"):
        create_app(settings())
    create_app(settings(replication_factor=3, min_insync_replicas=2))
