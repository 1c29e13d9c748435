"""The host stage's stored shape: the contract's JSON without defaults, read back unchanged."""

from __future__ import annotations

import json
from datetime import timedelta

from schemas.state import STATE_FORMAT, HostSchedule
from streams.policy.host import decide
from streams.stages.hosts import stored_schedule
from tests.unit.factories import (
    DEFAULT_CONFIG,
    NOW,
    fold,
    host_created,
    issued,
    maintenance_set,
    onboarded,
    scan_failed,
    scanned,
)


def _states() -> list[HostSchedule]:
    """A host through its usual lives: new, issued, scored, failed, in maintenance."""
    first = issued(onboarded(at=NOW), at=NOW)
    assert first.in_flight is not None
    later = NOW + timedelta(minutes=10)
    _, decisions = fold(
        [
            (later, scan_failed(first.in_flight.command_id, completed_at=later)),
            (later, maintenance_set(enabled=True, duration_hours=2, at=later)),
        ],
        schedule=first,
    )
    failed, in_maintenance = (decision.schedule for decision in decisions)
    assert failed is not None and in_maintenance is not None
    return [onboarded(at=NOW), first, scanned(score=42.5, high=1), failed, in_maintenance]


def test_every_stored_schedule_reads_back_as_it_was() -> None:
    for schedule in _states():
        assert HostSchedule.model_validate_json(stored_schedule(schedule)) == schedule


def test_a_stored_schedule_names_its_format_and_leaves_out_its_defaults() -> None:
    schedule = onboarded(at=NOW)

    record = stored_schedule(schedule)
    values = json.loads(record)

    assert values["format"] == STATE_FORMAT
    assert "maintenance_mode" not in values and "consecutive_scan_failures" not in values
    assert len(record) < 0.7 * len(schedule.model_dump_json(exclude_none=True))


def test_a_record_written_before_the_compact_shape_still_reads() -> None:
    schedule = scanned(score=90.0)
    written_before = schedule.model_dump_json(exclude_none=True).encode()

    assert HostSchedule.model_validate_json(written_before) == schedule


def test_a_default_left_out_is_given_back_when_read() -> None:
    schedule = decide(None, host_created(at=NOW), now=NOW, config=DEFAULT_CONFIG).schedule
    assert schedule is not None and schedule.attributes.is_active

    values = json.loads(stored_schedule(schedule))

    assert "is_active" not in values.get("attributes", {})
    assert HostSchedule.model_validate_json(json.dumps(values)).attributes.is_active
