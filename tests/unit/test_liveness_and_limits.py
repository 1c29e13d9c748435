"""The worker's watchdog and the contract's size limits, without a broker."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from schemas.objects import LABEL_VALUE_MAX_CHARS, LABELS_MAX, ObjectAttributes
from schemas.schedules import ARGS_MAX_BYTES, Schedule
from streams import codec
from streams.liveness import HEARTBEAT_FILE, Watchdog, heartbeat_age


@dataclass
class Part:
    crashed: bool = False
    crash_reason: BaseException | None = None


@dataclass
class Runtime:
    producer: Any = field(default_factory=lambda: Part())
    consumer: Part = field(default_factory=Part)
    _fetcher: Part = field(default_factory=Part)
    topics: Part = field(default_factory=Part)
    tables: Part = field(default_factory=Part)
    agents: dict[str, Any] = field(default_factory=dict)
    crashed: bool = False
    crash_reason: BaseException | None = None


def test_watchdog_finds_the_crashed_part_of_the_runtime(tmp_path: Path) -> None:
    runtime = Runtime()
    watchdog = Watchdog(runtime, tmp_path)
    assert next(watchdog._crashed_services(), None) is None
    runtime.producer.buffer = Part(crashed=True, crash_reason=RuntimeError("too large"))
    name, reason = next(watchdog._crashed_services())
    assert name == "producer buffer" and isinstance(reason, RuntimeError)


def test_heartbeat_age_counts_from_the_last_beat(tmp_path: Path) -> None:
    assert heartbeat_age(tmp_path) is None
    Watchdog(Runtime(), tmp_path)._beat()
    beat = float((tmp_path / HEARTBEAT_FILE).read_text())
    assert heartbeat_age(tmp_path, now=beat + 12.5) == pytest.approx(12.5)


def test_too_many_labels_are_refused_with_the_limit() -> None:
    with pytest.raises(ValidationError, match=f"at most {LABELS_MAX}"):
        ObjectAttributes(labels={f"k{n}": "v" for n in range(LABELS_MAX + 1)})


def test_a_label_value_past_the_limit_is_refused_naming_the_label() -> None:
    with pytest.raises(ValidationError, match=r"labels\.env\s+String should have at most 1024"):
        ObjectAttributes(labels={"env": "x" * (LABEL_VALUE_MAX_CHARS + 1)})


def test_schedule_args_past_the_limit_are_refused_with_their_size() -> None:
    values = {
        "id": "big",
        "name": "big",
        "scanner": "nmap",
        "recurrence": {"kind": "cron", "expression": "0 * * * *"},
        "args": {"blob": "a" * ARGS_MAX_BYTES},
    }
    with pytest.raises(ValidationError, match=r"args are \d+ bytes of JSON"):
        Schedule.model_validate(values)
    values["args"] = {"blob": "a" * 100}
    assert Schedule.model_validate(values).args == {"blob": "a" * 100}


def test_dead_letters_hold_no_nul_byte_for_postgresql() -> None:
    letter = codec.dead_letter(
        source_topic="t",
        partition=0,
        offset=1,
        key=b"k\x00",
        raw=b"\x00garbage\xff",
        error="bad \x00",
        received_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert "\x00" not in json.dumps([letter.raw, letter.key, letter.error])
    assert letter.raw.endswith("garbage\ufffd")
