"""The host stage's stored shape: the contract's JSON under short keys without defaults, read
back unchanged."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from schemas.schedules import ScheduleStateChanged
from schemas.state import STATE_FORMAT, HostSchedule, HostStateChanged
from streams import codec
from streams.codec import Undecodable
from streams.direct import changelog_key
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
from tests.unit.schedule_factories import created_state, cron, tick
from tests.unit.schedule_factories import schedule as schedule_of


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


def test_attributes_are_stored_only_where_they_differ_from_their_defaults() -> None:
    bare = decide(None, host_created(at=NOW), now=NOW, config=DEFAULT_CONFIG).schedule
    described = decide(
        None,
        host_created(at=NOW, hostname="web-1.example", labels={"env": "prod"}),
        now=NOW,
        config=DEFAULT_CONFIG,
    ).schedule
    assert bare is not None and described is not None

    assert "at" not in json.loads(stored_schedule(bare))
    stored = stored_schedule(described)
    assert json.loads(stored)["at"] == {
        "hostname": "web-1.example",
        "labels": {"env": "prod"},
    }
    assert HostSchedule.model_validate_json(stored) == described


def test_a_stored_schedule_names_its_format_and_leaves_out_its_defaults() -> None:
    schedule = onboarded(at=NOW)

    record = stored_schedule(schedule)
    values = json.loads(record)

    assert values["f"] == STATE_FORMAT == 2
    assert values["h"] == schedule.host_id and values["ca"] == "2026-03-01T12:00:00Z"
    assert "m" not in values and "cf" not in values  # maintenance_mode, consecutive failures
    assert len(record) < 0.5 * len(schedule.model_dump_json(exclude_none=True))


def test_a_schedule_in_flight_is_stored_under_short_keys_too() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    assert schedule.in_flight is not None

    stored = json.loads(stored_schedule(schedule))["if"]

    assert stored["c"] == schedule.in_flight.command_id
    assert not {"command_id", "due_at", "claimed_at"} & set(stored)


def test_a_record_of_the_first_format_reads_and_is_stored_again_in_the_current_one() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    first_format = schedule.model_dump(mode="json", exclude_none=True) | {"format": 1}

    read = HostSchedule.model_validate_json(json.dumps(first_format))

    assert read == schedule.model_copy(update={"format": 1})
    assert json.loads(stored_schedule(read))["f"] == STATE_FORMAT
    assert HostSchedule.model_validate_json(stored_schedule(read)) == schedule


def test_a_record_written_before_the_compact_shape_still_reads() -> None:
    schedule = scanned(score=90.0)
    written_before = schedule.model_dump_json(exclude_none=True).encode()

    assert HostSchedule.model_validate_json(written_before) == schedule


def test_a_default_left_out_is_given_back_when_read() -> None:
    schedule = decide(None, host_created(at=NOW), now=NOW, config=DEFAULT_CONFIG).schedule
    assert schedule is not None and schedule.attributes.is_active

    values = json.loads(stored_schedule(schedule))

    assert "is_active" not in values.get("at", {})
    assert HostSchedule.model_validate_json(json.dumps(values)).attributes.is_active


class _JsonKeyedTable:
    """What `changelog_key` reads of a Faust table whose keys are str (Kairos' tables)."""

    key_serializer = "json"


def test_a_hosts_changelog_record_reads_as_the_hosts_change() -> None:
    for schedule in _states():
        for host_id in (schedule.host_id, 'odd "schedule":null host', "hôte\\n"):
            key = changelog_key(_JsonKeyedTable(), host_id)

            change = codec.host_changelog_change(key, stored_schedule(schedule), (), 0)

            assert change == HostStateChanged(
                host_id=host_id,
                version=schedule.version,
                schedule=schedule,
                changed_at=schedule.updated_at,
            )


def test_a_hosts_tombstone_reads_as_a_deletion_at_the_time_its_header_gives() -> None:
    at = datetime(2030, 1, 1, 9, 30, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    key = changelog_key(_JsonKeyedTable(), "gone-1")
    headers = (("other", b"x"), (codec.DELETED_AT_HEADER, codec.instant(at)))

    change = codec.host_changelog_change(key, None, headers, 0)

    assert change == HostStateChanged(host_id="gone-1", version=0, schedule=None, changed_at=at)


def test_a_hosts_tombstone_says_which_incarnation_it_ends() -> None:
    created = datetime(2029, 6, 1, 8, 0, tzinfo=UTC)
    key = changelog_key(_JsonKeyedTable(), "gone-1")
    headers = (
        (codec.DELETED_AT_HEADER, codec.instant(NOW)),
        (codec.CREATED_AT_HEADER, codec.instant(created)),
    )

    change = codec.host_changelog_change(key, None, headers, 0)

    assert change.deleted_created_at == created and change.changed_at == NOW
    assert codec.host_changelog_change(key, None, headers[:1], 0).deleted_created_at is None


def test_a_hosts_tombstone_without_its_header_takes_the_records_timestamp() -> None:
    key = changelog_key(_JsonKeyedTable(), "gone-1")

    change = codec.host_changelog_change(key, None, (), int(NOW.timestamp() * 1000))

    assert change.changed_at == NOW and change.schedule is None


def test_an_unreadable_hosts_changelog_record_is_undecodable() -> None:
    stored = stored_schedule(_states()[0])
    for key, value, headers in (
        (b"not json", stored, ()),
        (b'["a list"]', stored, ()),
        (None, stored, ()),
        (b'"h-1"', b"garbage", ()),
        (b'"h-1"', None, ((codec.DELETED_AT_HEADER, b"yesterday"),)),
        (b'"h-1"', None, ((codec.CREATED_AT_HEADER, b"long ago"),)),
    ):
        with pytest.raises(Undecodable):
            codec.host_changelog_change(key, value, headers, 0)


def test_a_state_record_is_written_byte_for_byte_as_its_model_would_be() -> None:
    at = datetime(2030, 1, 1, 9, 30, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    for key in ("gone-1", 'odd "schedule":null', "hôte\\n", "tab\tline\n\x01\x7f", "\u2028😀"):
        for when in (NOW, at):
            schedule = ScheduleStateChanged(schedule_id=key, version=3, state=None, changed_at=when)

            assert codec.schedule_state_changed_record(key, 3, None, when) == codec.encode(schedule)


def test_a_schedule_state_record_around_the_stored_state_reads_as_the_full_record() -> None:
    created = created_state(schedule_of(cron("*/5 * * * *")))
    running = tick(created, NOW + timedelta(hours=1)).state
    for state in (created, running):
        assert state is not None
        stored = state.model_dump_json(exclude_none=True).encode()

        record = codec.schedule_state_changed_record('nightly "state":null', 4, stored, NOW)

        assert ScheduleStateChanged.model_validate_json(record) == ScheduleStateChanged(
            schedule_id='nightly "state":null', version=4, state=state, changed_at=NOW
        )
    deleted = codec.schedule_state_changed_record("nightly", 5, None, NOW)
    assert ScheduleStateChanged.model_validate_json(deleted).state is None
