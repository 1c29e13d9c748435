"""The CLI's pure parts: dev.env files, exit codes per API answer, message validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kairos.client import ApiError, exit_code_for
from kairos.devenv import (
    STACK_VARS,
    AlreadyRunning,
    DevLock,
    apply_dev_env,
    read_env_file,
    write_dev_env,
)
from kairos.eventscli import parse_messages, validate_message


def test_dev_env_round_trips_quoted_values(tmp_path: Path) -> None:
    values = {"DATABASE_URL": "postgresql://u:p w@h:1/db", "KAIROS_TOKEN": "kairos_a-b"}
    path = write_dev_env(tmp_path, values)
    assert read_env_file(path) == values
    assert path.stat().st_mode & 0o077 == 0, "the file holds a token: owner only"


def test_dev_env_fills_only_when_the_environment_names_no_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / ".kairos"
    home.mkdir()
    write_dev_env(home, {"DATABASE_URL": "postgresql://x/db", "KAIROS_TOKEN": "t"})
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    environ: dict[str, str] = {"KAIROS_TOKEN": "mine"}
    assert apply_dev_env(environ) == home / "dev.env"
    assert environ == {"KAIROS_TOKEN": "mine", "DATABASE_URL": "postgresql://x/db"}
    for name in STACK_VARS:
        assert apply_dev_env({name: "elsewhere"}) is None


def test_a_second_lock_holder_is_told_where_the_first_runs(tmp_path: Path) -> None:
    first = DevLock(tmp_path / ".kairos")
    first.home.mkdir()
    first.acquire()
    first.describe({"pid": 4242, "state": "running", "api_url": "http://127.0.0.1:8000"})
    try:
        with pytest.raises(AlreadyRunning, match=r"pid 4242.*http://127.0.0.1:8000"):
            DevLock(first.home).acquire()
    finally:
        first.release()
    second = DevLock(first.home)
    second.acquire()
    second.release()


@pytest.mark.parametrize(
    ("status", "code"), [(401, 3), (403, 3), (404, 4), (409, 5), (422, 6), (503, 2), (500, 1)]
)
def test_exit_code_says_what_the_api_answered(status: int, code: int) -> None:
    assert exit_code_for(status) == code
    assert ApiError(status, "x").exit_code == code


def test_unreachable_api_exits_like_an_unreachable_dependency() -> None:
    assert ApiError(0, "not reachable").exit_code == 2


def test_a_422_names_its_field() -> None:
    error = ApiError(422, "invalid", [{"field": "recurrence.expression", "message": "bad"}])
    assert "recurrence.expression: bad" in str(error)


def test_messages_parse_as_object_array_or_lines() -> None:
    one = {"a": 1}
    assert parse_messages(json.dumps(one), "f") == [one]
    assert parse_messages(json.dumps([one, one]), "f") == [one, one]
    assert parse_messages('{"a": 1}\n{"a": 2}\n', "f") == [{"a": 1}, {"a": 2}]
    with pytest.raises(ValueError, match="not JSON"):
        parse_messages("{nope", "f")


def test_publish_validation_names_the_field_and_keys_like_kairos() -> None:
    raw = {"object_type": "host", "object_id": "h1", "occurred_at": "2026-01-01T00:00:00Z"}
    message, key = validate_message("object-created", raw)
    assert key == "h1" and message.event_id is not None
    with pytest.raises(ValueError, match="occurred_at"):
        validate_message("object-created", {**raw, "occurred_at": "2026-01-01T00:00:00"})
    change = {"type": "config.updated", "occurred_at": "2026-01-01T00:00:00Z", "changes": {}}
    assert validate_message("schedule-changes", change)[1] == "config"
    with pytest.raises(ValueError, match="changes.max_concurrent_scans"):
        validate_message("schedule-changes", {**change, "changes": {"max_concurrent_scans": 0}})
