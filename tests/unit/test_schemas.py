"""The message contract: strict, immutable, timezone-aware, discriminated."""

from __future__ import annotations

import gc
import json
import tracemalloc
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from schemas.base import CommandReason, ComplianceState
from schemas.changes import (
    ConfigUpdated,
    HostMaintenanceSet,
    HostScanRequested,
    HostsInitializeRequested,
    HostStatusChanged,
    ScheduleChange,
    SchedulerToggled,
)
from schemas.commands import ScanCommand
from schemas.config import SchedulerConfig
from schemas.internal import (
    CommandIssued,
    CommandTimedOut,
    DispatchBatch,
    DispatchMessage,
    HostDue,
    HostReplanRequested,
    HostSignal,
    IssuedBeforeForce,
    ScheduleDue,
    ScheduleFanOut,
    ScheduleFanOuts,
    SchedulesDue,
    SlotReleased,
)
from schemas.objects import ObjectEvent
from schemas.results import ERROR_MAX_CHARS, ScanCompleted
from schemas.schedules import RunPlan, ScheduleStateChanged
from schemas.state import HostSchedule
from streams import codec
from streams.stages.schedules import is_schedule_message, may_change_triggers
from tests.unit.factories import (
    HOST,
    NOW,
    dispatch_request,
    issued,
    onboarded,
    scan_failed,
    scan_succeeded,
)
from tests.unit.schedule_factories import created_state, cron, schedule

NAIVE = datetime(2026, 3, 1, 12, 0)
schedule_change: TypeAdapter[Any] = TypeAdapter(ScheduleChange)


def object_event(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "event_id": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
        "object_type": "host",
        "object_id": HOST,
        "occurred_at": "2026-03-01T12:00:00Z",
    }
    return {**values, **overrides}


def scan_result(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "command_id": "cmd-1",
        "host_id": HOST,
        "status": "succeeded",
        "completed_at": "2026-03-01T12:00:00Z",
        "score": 92.5,
    }
    return {**values, **overrides}


def error_types(error: ValidationError) -> set[str]:
    return {item["type"] for item in error.errors()}


# --- datetimes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "values"),
    [
        (ObjectEvent, object_event(occurred_at=NAIVE)),
        (ScanCompleted, scan_result(completed_at=NAIVE)),
        (ScanCompleted, scan_result(started_at=NAIVE)),
        (HostDue, {"host_id": HOST, "wake_at": NAIVE}),
        (
            HostSchedule,
            {"host_id": HOST, "next_scheduled_scan": NAIVE, "created_at": NOW, "updated_at": NOW},
        ),
    ],
    ids=["object-event", "scan-completed", "scan-started", "host-due", "host-schedule"],
)
def test_naive_datetime_is_refused(model: type, values: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(values)
    assert "timezone_aware" in error_types(caught.value)


def test_naive_iso_string_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        ObjectEvent.model_validate(object_event(occurred_at="2026-03-01T12:00:00"))
    assert [item["loc"] for item in caught.value.errors()] == [("occurred_at",)]


def test_datetime_with_an_offset_keeps_the_instant() -> None:
    plus_two = timezone(timedelta(hours=2))
    event = ObjectEvent.model_validate(object_event(occurred_at="2026-03-01T14:00:00+02:00"))

    assert event.occurred_at == NOW
    assert event.occurred_at.utcoffset() == plus_two.utcoffset(None)


# --- strictness and immutability ----------------------------------------------------


@pytest.mark.parametrize(
    ("model", "values"),
    [
        (ObjectEvent, object_event(colour="blue")),
        (ScanCompleted, scan_result(duration_ms=12)),
        (ObjectEvent, object_event(attributes={"hostname": "a", "rack": "r1"})),
        (SchedulerConfig, {"enabled": True, "interval_weekly": 10080}),
    ],
    ids=["object-event", "scan-completed", "nested-attributes", "config"],
)
def test_extra_field_is_refused(model: type, values: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(values)
    assert error_types(caught.value) == {"extra_forbidden"}


def test_extra_field_in_json_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        ScanCompleted.model_validate_json(
            '{"event_id": "1b4e28ba-2fa1-11d2-883f-0016d3cca427", "command_id": "c",'
            ' "host_id": "h", "status": "failed", "completed_at": "2026-03-01T12:00:00Z",'
            ' "retries": 3}'
        )
    assert [item["loc"] for item in caught.value.errors()] == [("retries",)]


def test_messages_are_immutable() -> None:
    result = scan_succeeded("cmd-1", completed_at=NOW)
    with pytest.raises(ValidationError):
        result.score = 10.0  # type: ignore[misc]
    assert result.score == 100.0


# --- scan results -------------------------------------------------------------------


def test_scan_error_is_truncated_to_500_chars() -> None:
    long_error = "Traceback: " + "x" * 2000

    result = scan_failed("cmd-1", completed_at=NOW, error=long_error)

    assert ERROR_MAX_CHARS == 500
    assert result.error == long_error[:500]
    assert len(result.error) == 500


def test_short_scan_error_is_kept_whole() -> None:
    assert scan_failed("cmd-1", completed_at=NOW, error="disk full").error == "disk full"
    assert scan_failed("cmd-1", completed_at=NOW, error=None).error is None


@pytest.mark.parametrize(
    "overrides",
    [{"score": 100.5}, {"score": -1}, {"severity_high_failed": -1}, {"status": "crashed"}],
)
def test_scan_result_out_of_range_is_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as caught:
        ScanCompleted.model_validate(scan_result(**overrides))
    assert [item["loc"] for item in caught.value.errors()] == [(next(iter(overrides)),)]


# --- identity -----------------------------------------------------------------------


@pytest.mark.parametrize("event_id", ["not-a-uuid", "", "1234", 42])
def test_event_id_must_be_a_uuid(event_id: object) -> None:
    with pytest.raises(ValidationError) as caught:
        ObjectEvent.model_validate(object_event(event_id=event_id))
    assert [item["loc"] for item in caught.value.errors()] == [("event_id",)]


def test_event_id_string_is_parsed_as_a_uuid() -> None:
    event = ObjectEvent.model_validate(object_event())
    assert event.event_id == uuid.UUID("1b4e28ba-2fa1-11d2-883f-0016d3cca427")


def test_only_schema_version_1_is_accepted() -> None:
    assert ObjectEvent.model_validate(object_event()).schema_version == 1
    with pytest.raises(ValidationError) as caught:
        ObjectEvent.model_validate(object_event(schema_version=2))
    assert [item["loc"] for item in caught.value.errors()] == [("schema_version",)]


# --- schedule changes ---------------------------------------------------------------


def change(type_: str, **values: Any) -> dict[str, Any]:
    return {
        "type": type_,
        "event_id": str(uuid.uuid4()),
        "occurred_at": "2026-03-01T12:00:00Z",
        **values,
    }


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (change("config.updated", changes={"interval_critical": 30}), ConfigUpdated),
        (change("scheduler.toggled", enabled=False), SchedulerToggled),
        (
            change("host.maintenance_set", host_id=HOST, enabled=True, duration_hours=4),
            HostMaintenanceSet,
        ),
        (change("host.scan_requested", host_id=HOST), HostScanRequested),
        (change("host.status_changed", host_id=HOST, status="down"), HostStatusChanged),
        (change("hosts.initialize_requested"), HostsInitializeRequested),
    ],
)
def test_schedule_change_is_decoded_by_its_type(values: dict[str, Any], expected: type) -> None:
    decoded = schedule_change.validate_python(values)
    assert type(decoded) is expected
    assert decoded.type == values["type"]


def test_unknown_schedule_change_type_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        schedule_change.validate_python(change("host.rebooted", host_id=HOST))
    assert error_types(caught.value) == {"union_tag_invalid"}


def test_schedule_change_without_type_is_refused() -> None:
    values = change("host.scan_requested", host_id=HOST)
    del values["type"]
    with pytest.raises(ValidationError) as caught:
        schedule_change.validate_python(values)
    assert error_types(caught.value) == {"union_tag_not_found"}


def test_schedule_change_is_checked_against_its_own_type() -> None:
    # Right fields for maintenance, wrong type tag: the scan request refuses `enabled`.
    values = change("host.scan_requested", host_id=HOST, enabled=True)
    with pytest.raises(ValidationError) as caught:
        schedule_change.validate_python(values)
    assert error_types(caught.value) == {"extra_forbidden"}


def test_config_updated_with_out_of_range_change_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        schedule_change.validate_python(change("config.updated", changes={"priority_low": 0}))
    locs = [item["loc"] for item in caught.value.errors()]
    assert locs == [("config.updated", "changes", "priority_low")]


@pytest.mark.parametrize("hours", [0, 169])
def test_maintenance_duration_out_of_range_is_refused(hours: int) -> None:
    with pytest.raises(ValidationError):
        schedule_change.validate_python(
            change("host.maintenance_set", host_id=HOST, enabled=True, duration_hours=hours)
        )


# --- internal messages --------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "adapter"),
    [
        (HostDue(host_id=HOST, wake_at=NOW), HostSignal),
        (CommandIssued(host_id=HOST, command_id="c", issued_at=NOW, deadline=NOW), HostSignal),
        (CommandTimedOut(host_id=HOST, command_id="c", deadline=NOW), HostSignal),
        (
            IssuedBeforeForce(event_id=uuid.uuid4(), host_id=HOST, command_id="c"),
            HostSignal,
        ),
        (HostReplanRequested(host_id=HOST, config_version=3, initialize=True), HostSignal),
        (SlotReleased(command_id="c", outcome="timed_out"), DispatchMessage),
        (
            DispatchBatch(
                messages=(
                    dispatch_request("c", host_id=HOST),
                    SlotReleased(command_id="c", outcome="completed"),
                )
            ),
            DispatchMessage,
        ),
    ],
)
def test_internal_message_round_trips_through_its_union(message: Any, adapter: Any) -> None:
    decoded = TypeAdapter(adapter).validate_json(message.model_dump_json())
    assert decoded == message
    assert type(decoded) is type(message)


def test_scan_command_priority_must_be_between_1_and_10() -> None:
    values: dict[str, Any] = {
        "event_id": uuid.uuid4(),
        "command_id": "c",
        "host_id": HOST,
        "priority": 11,
        "reason": CommandReason.FORCE,
        "state": ComplianceState.UNKNOWN,
        "due_at": NOW,
        "issued_at": NOW,
        "deadline": NOW,
        "attempt": 1,
    }
    with pytest.raises(ValidationError) as caught:
        ScanCommand.model_validate(values)
    assert [item["loc"] for item in caught.value.errors()] == [("priority",)]
    assert ScanCommand.model_validate({**values, "priority": 10}).priority == 10


def test_host_schedule_round_trips_through_json() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)

    restored = HostSchedule.model_validate_json(schedule.model_dump_json())

    assert restored == schedule
    assert restored.in_flight_command_id == schedule.in_flight_command_id is not None


def test_an_empty_dispatch_batch_is_refused() -> None:
    with pytest.raises(ValidationError, match="messages"):
        TypeAdapter(DispatchMessage).validate_python({"kind": "dispatch.batch", "messages": []})


def test_a_dispatch_batch_joined_from_encoded_messages_decodes_as_the_batch() -> None:
    messages = (
        dispatch_request("a", host_id=HOST),
        SlotReleased(command_id="b", outcome="completed"),
        dispatch_request("c", host_id=HOST),
    )

    joined = codec.dispatch_batch([codec.encode(message) for message in messages])

    assert codec.decode(codec.dispatch_message, joined) == DispatchBatch(messages=messages)


def test_a_dispatch_batch_with_an_unreadable_message_is_read_message_by_message() -> None:
    good = (dispatch_request("a", host_id=HOST), SlotReleased(command_id="b", outcome="completed"))
    unknown_kind = b'{"kind":"dispatch.postponed","command_id":"c"}'
    joined = codec.dispatch_batch([codec.encode(good[0]), unknown_kind, codec.encode(good[1])])
    with pytest.raises(codec.Undecodable):
        codec.decode(codec.dispatch_message, joined)

    split = codec.split_dispatch_batch(joined)

    assert split is not None
    readable, unreadable = split
    assert readable == list(good)
    [(index, raw, reason)] = unreadable
    assert index == 1
    assert json.loads(raw) == json.loads(unknown_kind)
    assert reason.startswith("message 1 of a dispatch batch: schema validation failed")


@pytest.mark.parametrize(
    "raw",
    [b"not json", b'{"kind":"slot.released"}', b'{"kind":"dispatch.batch","messages":7}', None],
)
def test_only_a_batch_is_read_message_by_message(raw: bytes | None) -> None:
    assert codec.split_dispatch_batch(raw) is None


def test_dead_letters_of_one_record_are_told_apart_by_part() -> None:
    def letter(part: int | None) -> Any:
        return codec.dead_letter(
            source_topic="t",
            partition=0,
            offset=5,
            key=None,
            raw=b"x",
            error="e",
            received_at=NOW,
            part=part,
        )

    assert letter(None).event_id == letter(None).event_id
    assert len({letter(None).event_id, letter(0).event_id, letter(1).event_id}) == 3


def test_a_schedules_due_signal_is_told_from_a_single_schedule_due() -> None:
    many = SchedulesDue(schedule_ids=("nightly", "weekly"), wake_at=NOW)
    one = ScheduleDue(schedule_id="nightly", wake_at=NOW)

    assert codec.decode(codec.schedule_signal, codec.encode(many)) == many
    assert codec.decode(codec.schedule_signal, codec.encode(one)) == one
    assert is_schedule_message(codec.encode(many))  # The host stage hands it on.
    with pytest.raises(ValidationError, match="schedule_ids"):
        SchedulesDue(schedule_ids=(), wake_at=NOW)


def test_only_records_that_may_touch_the_trigger_index_are_decoded() -> None:
    def change(schedule_id: str, recurrence: dict[str, Any] | None = None, **fields: Any) -> bytes:
        sched = schedule(recurrence or cron("* * * * *"), schedule_id=schedule_id, **fields)
        state = created_state(sched)
        return codec.encode(
            ScheduleStateChanged(schedule_id=schedule_id, version=1, state=state, changed_at=NOW)
        )

    on_created = {"run_on": "host", "operation": "created"}
    trigger = change("on-create", recurrence={"kind": "none"}, trigger=on_created)
    plain = change("nightly")
    named_in_args = change("nightly", args={"trigger": {"note": "not a trigger"}})
    gone = codec.encode(
        ScheduleStateChanged(schedule_id="on-create", version=2, state=None, changed_at=NOW)
    )

    assert may_change_triggers(b"on-create", trigger, {})
    assert not may_change_triggers(b"nightly", plain, {})
    assert may_change_triggers(b"nightly", named_in_args, {})  # Decoded, found to be none.
    assert may_change_triggers(b"on-create", gone, {"on-create": object()})
    assert not may_change_triggers(b"on-create", gone, {})
    assert may_change_triggers(None, plain, {})


def test_fan_outs_joined_from_encoded_fan_outs_decode_as_one_batch() -> None:
    fan_outs = tuple(
        ScheduleFanOut(
            schedule=schedule(cron("* * * * *"), schedule_id=schedule_id),
            run=RunPlan(schedule_id=schedule_id, occurrence=NOW, due_at=NOW),
            expected=1,
        )
        for schedule_id in ("nightly", "weekly")
    )

    joined = codec.schedule_fan_outs([codec.encode(fan_out) for fan_out in fan_outs])

    assert codec.decode(codec.schedule_signal, joined) == ScheduleFanOuts(fan_outs=fan_outs)
    assert is_schedule_message(joined)


def test_decoding_messages_keeps_none_of_their_values() -> None:
    # pydantic caches the strings it decodes from JSON, 16,384 of them, by default values
    # too: ids and host names that never come again, about 1.1 MB held in each process.
    raws = [
        json.dumps(
            {
                "event_id": str(uuid.uuid4()),
                "object_type": "host",
                "object_id": f"host-{number:07d}",
                "operation": "created",
                "occurred_at": "2026-03-01T12:00:00Z",
                "attributes": {"hostname": f"host-{number:07d}.example"},
            }
        ).encode()
        for number in range(5_000)
    ]
    tracing_already = tracemalloc.is_tracing()  # e.g. under PYTHONTRACEMALLOC
    if not tracing_already:
        tracemalloc.start()
    try:
        gc.collect()
        before, _ = tracemalloc.get_traced_memory()
        for raw in raws:
            ObjectEvent.model_validate_json(raw)
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        if not tracing_already:
            tracemalloc.stop()

    assert retained < 50_000, f"{retained:,} bytes held after the messages were dropped"
