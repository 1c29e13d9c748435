"""The schedule contract: validation of definitions, filters and schedule.* events."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from schemas.schedules import (
    CatchupPolicy,
    DstPolicy,
    ExclusionAction,
    OverlapPolicy,
    Schedule,
    ScheduleEvent,
    ScheduleUpserted,
    Targets,
)
from tests.unit.schedule_factories import T0, cron, every, rrule_, schedule

EVENTS: TypeAdapter[Any] = TypeAdapter(ScheduleEvent)


def rejected(**fields: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        schedule(**fields)
    return str(caught.value)


def test_defaults_are_the_documented_policies() -> None:
    sched = schedule(cron("0 2 * * *"))
    assert sched.timezone == "UTC" and sched.priority == 5 and sched.max_retries == 5
    assert sched.catchup is CatchupPolicy.ONCE
    assert sched.overlap is OverlapPolicy.SKIP
    assert sched.dst_policy is DstPolicy.RUN_ONCE_SHIFTED
    assert sched.exclusion_action is ExclusionAction.DEFER
    assert sched.targets.object_type == "host" and sched.targets.filter is None


def test_schedule_is_frozen_and_refuses_unknown_fields() -> None:
    sched = schedule(cron("0 2 * * *"))
    with pytest.raises(ValidationError):
        sched.priority = 9  # type: ignore[misc]
    assert "extra" in rejected(recurrence=cron("0 2 * * *"), colour="blue").lower()


@pytest.mark.parametrize(
    ("recurrence", "quoted"),
    [
        (cron("0 2 * *"), "'0 2 * *'"),
        (cron("0 2 * * * * *"), "7 fields"),
        (cron("0 2 * * ;ls"), "';ls'"),
        (rrule_("FREQ=DAILY;COUNT=5"), "max_runs"),
        (rrule_("FREQ=SECONDLY"), "SECONDLY"),
        (rrule_("FREQ=MINUTELY;BYSETPOS=3"), "BYSETPOS=3 can never"),
        (rrule_("FREQ=MONTHLY;BYDAY=MO;BYSETPOS=32"), "at most 31"),
        (rrule_("FREQ=DAILY;X-NAME=1"), "'X-NAME'"),
        (rrule_("BYDAY=MO"), "no FREQ"),
        (every(), "at least one second"),
        (every(days=400), "366"),
    ],
)
def test_bad_recurrence_is_refused_with_the_problem_quoted(
    recurrence: dict[str, Any], quoted: str
) -> None:
    assert quoted in rejected(recurrence=recurrence)


def test_rrule_text_is_normalised() -> None:
    sched = schedule(rrule_("rrule:freq=monthly;byday=-1fr"))
    assert sched.recurrence.rule == "FREQ=MONTHLY;BYDAY=-1FR"  # type: ignore[union-attr]


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "../../etc/passwd", "", "UTC+5"])
def test_unknown_timezone_is_refused(zone: str) -> None:
    assert "timezone" in rejected(recurrence=cron("0 2 * * *"), timezone=zone)


def test_end_must_follow_start() -> None:
    assert "end_at" in rejected(recurrence=cron("0 2 * * *"), start_at=T0, end_at=T0)


def test_priority_is_between_one_and_ten() -> None:
    assert "priority" in rejected(recurrence=cron("0 2 * * *"), priority=11)


def test_trigger_object_type_must_be_the_target_type() -> None:
    problem = rejected(
        recurrence={"kind": "none"}, trigger={"run_on": "container", "operation": "created"}
    )
    assert "run_on" in problem


@pytest.mark.parametrize(
    ("raw", "quoted"),
    [
        ({"field": "1; DROP TABLE hosts", "op": "eq", "value": "x"}, "'1; DROP TABLE hosts'"),
        ({"field": "__class__", "op": "eq", "value": "x"}, "'__class__'"),
        ({"field": "labels.__import__('os')", "op": "eq", "value": "x"}, "unknown filter field"),
        ({"field": "hostname", "op": "regex", "value": ".*"}, "regex"),
        ({"field": "hostname", "op": "eq", "value": {"$ne": 1}}, "not a JSON string"),
        ({"field": "state", "op": "eq", "value": "bogus"}, "'bogus'"),
        ({"field": "status", "op": "lt", "value": "up"}, "no order"),
        ({"field": "ip", "op": "gt", "value": "not-an-ip"}, "not an IP"),
        ({"field": "hostname", "op": "in", "value": "web"}, "non-empty list"),
        ({"field": "is_active", "op": "eq", "value": "yes"}, "true or false"),
        ({"sql": "SELECT 1"}, "field"),
    ],
)
def test_filter_injection_and_nonsense_are_refused_at_validation(
    raw: dict[str, Any], quoted: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        Targets.model_validate({"filter": raw})
    assert quoted in str(caught.value)


def test_filter_only_applies_to_hosts() -> None:
    with pytest.raises(ValidationError, match="hosts only"):
        Targets.model_validate(
            {"object_type": "repo", "filter": {"field": "os", "op": "eq", "value": "x"}}
        )


def test_filter_size_and_depth_are_bounded() -> None:
    leaf = {"field": "os", "op": "eq", "value": "x"}
    deep: dict[str, Any] = leaf
    for _ in range(7):
        deep = {"all": [deep]}
    with pytest.raises(ValidationError, match="levels deep"):
        Targets.model_validate({"filter": deep})
    with pytest.raises(ValidationError, match="at most 64"):
        Targets.model_validate({"filter": {"any": [{"all": [leaf] * 40}, {"all": [leaf] * 40}]}})


def test_schedule_json_round_trips() -> None:
    sched = schedule(
        rrule_("FREQ=WEEKLY;BYDAY=MO"),
        timezone="Europe/Amsterdam",
        targets={"filter": [{"field": "labels.env", "op": "in", "value": ["prod", "acc"]}]},
        exclusions=[{"recurrence": cron("0 22 * * 5"), "duration_seconds": 7200}],
        args={"profile": "cis", "depth": 2},
    )
    assert Schedule.model_validate_json(sched.model_dump_json()) == sched


def test_events_parse_by_type_and_carry_the_common_fields() -> None:
    common = {
        "event_id": str(uuid.uuid4()),
        "occurred_at": T0.isoformat(),
        "schedule_id": "sched-1",
    }
    paused = EVENTS.validate_python(common | {"type": "schedule.paused", "note": "freeze"})
    assert type(paused).__name__ == "SchedulePaused" and paused.note == "freeze"
    assert paused.schema_version == 1 and paused.actor == "system"
    fill = EVENTS.validate_python(
        common
        | {
            "type": "schedule.backfill_requested",
            "start": T0.isoformat(),
            "end": (T0 + timedelta(days=1)).isoformat(),
        }
    )
    assert fill.end - fill.start == timedelta(days=1)
    with pytest.raises(ValidationError, match="after start"):
        EVENTS.validate_python(
            common
            | {
                "type": "schedule.backfill_requested",
                "start": T0.isoformat(),
                "end": T0.isoformat(),
            }
        )
    with pytest.raises(ValidationError):
        EVENTS.validate_python(common | {"type": "schedule.exploded"})


def test_upsert_must_name_the_schedule_it_carries() -> None:
    with pytest.raises(ValidationError, match="differs"):
        ScheduleUpserted(
            event_id=uuid.uuid4(),
            occurred_at=T0,
            schedule_id="other",
            schedule=schedule(cron("0 2 * * *")),
        )


def test_naive_timestamps_are_refused() -> None:
    with pytest.raises(ValidationError):
        schedule(cron("0 2 * * *"), start_at=T0.replace(tzinfo=None))
