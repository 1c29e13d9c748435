"""Builders for the generic-schedule unit tests (beside `factories.py`, the host policy's).

Every builder returns a fresh, immutable value; nothing is shared between tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.base import ComplianceState, HostStatus
from schemas.internal import ReleaseOutcome
from schemas.objects import ObjectAttributes, ObjectEvent, Operation
from schemas.schedules import (
    RunPlan,
    Schedule,
    ScheduleBackfillRequested,
    ScheduleDeleted,
    ScheduleDisabled,
    ScheduleEnabled,
    SchedulePaused,
    ScheduleResumed,
    ScheduleState,
    ScheduleTriggered,
    ScheduleUpserted,
)
from schemas.state import HostSchedule
from streams.policy.schedules import (
    ScheduleDecision,
    ScheduleInput,
    decide_schedule,
    due_runs,
    run_dispatched,
    run_finished,
)

T0 = datetime(2026, 3, 29, 0, 0, tzinfo=UTC)
SCHEDULE_ID = "sched-1"
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def cron(expression: str) -> dict[str, str]:
    return {"kind": "cron", "expression": expression}


def rrule_(rule: str) -> dict[str, str]:
    return {"kind": "rrule", "rule": rule}


def every(**parts: int) -> dict[str, Any]:
    return {"kind": "interval", **parts}


def schedule(
    recurrence: dict[str, Any] | None = None, *, schedule_id: str = SCHEDULE_ID, **fields: Any
) -> Schedule:
    values: dict[str, Any] = {
        "id": schedule_id,
        "name": f"name-{schedule_id}",
        "scanner": "nmap",
        "recurrence": recurrence or cron("0 * * * *"),
    }
    return Schedule.model_validate(values | fields)


def upserted(
    sched: Schedule, *, at: datetime = T0, event_id: uuid.UUID | None = None
) -> ScheduleUpserted:
    return ScheduleUpserted(
        event_id=event_id or uuid.uuid4(), occurred_at=at, schedule_id=sched.id, schedule=sched
    )


def _ids(at: datetime, schedule_id: str) -> dict[str, Any]:
    return {"event_id": uuid.uuid4(), "occurred_at": at, "schedule_id": schedule_id}


def deleted(*, at: datetime = T0, schedule_id: str = SCHEDULE_ID) -> ScheduleDeleted:
    return ScheduleDeleted(**_ids(at, schedule_id))


def enabled(*, at: datetime = T0, schedule_id: str = SCHEDULE_ID) -> ScheduleEnabled:
    return ScheduleEnabled(**_ids(at, schedule_id))


def disabled(
    *, at: datetime = T0, reason: str | None = None, schedule_id: str = SCHEDULE_ID
) -> ScheduleDisabled:
    return ScheduleDisabled(**_ids(at, schedule_id), reason=reason)


def paused(
    *, at: datetime = T0, note: str | None = "change freeze", schedule_id: str = SCHEDULE_ID
) -> SchedulePaused:
    return SchedulePaused(**_ids(at, schedule_id), note=note)


def resumed(*, at: datetime = T0, schedule_id: str = SCHEDULE_ID) -> ScheduleResumed:
    return ScheduleResumed(**_ids(at, schedule_id))


def triggered(*, at: datetime = T0, schedule_id: str = SCHEDULE_ID) -> ScheduleTriggered:
    return ScheduleTriggered(**_ids(at, schedule_id))


def backfill(
    start: datetime, end: datetime, *, at: datetime = T0, schedule_id: str = SCHEDULE_ID
) -> ScheduleBackfillRequested:
    return ScheduleBackfillRequested(**_ids(at, schedule_id), start=start, end=end)


def object_event(
    object_id: str,
    operation: Operation,
    *,
    at: datetime = T0,
    object_type: str = "host",
    **attributes: Any,
) -> ObjectEvent:
    return ObjectEvent(
        event_id=uuid.uuid4(),
        object_type=object_type,
        object_id=object_id,
        operation=operation,
        occurred_at=at,
        attributes=ObjectAttributes(**attributes),
    )


def created_state(
    sched: Schedule, *, at: datetime = T0, event_id: uuid.UUID | None = None
) -> ScheduleState:
    decision = decide_schedule(None, upserted(sched, at=at, event_id=event_id), now=at)
    assert decision.state is not None, decision.rejection
    return decision.state


def fold(
    state: ScheduleState | None, inputs: Iterable[tuple[datetime, ScheduleInput]]
) -> tuple[ScheduleState | None, list[ScheduleDecision]]:
    decisions = []
    for now, event in inputs:
        decision = decide_schedule(state, event, now=now)
        decisions.append(decision)
        state = decision.state
    return state, decisions


def tick(state: ScheduleState, now: datetime) -> ScheduleDecision:
    return due_runs(state, now=now)


def dispatch(
    state: ScheduleState, run: RunPlan, host_ids: Sequence[str], *, now: datetime
) -> ScheduleState:
    """`state` after the worker sent one command per host of `run`."""
    decision = run_dispatched(state, run, len(set(host_ids)), now=now)
    assert decision.state is not None
    return decision.state


def finish(
    state: ScheduleState,
    run: RunPlan,
    host_id: str,
    *,
    now: datetime,
    outcome: ReleaseOutcome = ReleaseOutcome.COMPLETED,
    error: str | None = None,
) -> ScheduleDecision:
    return run_finished(
        state,
        run.occurrence,
        run.attempt,
        outcome=outcome,
        now=now,
        host_id=host_id,
        error=error,
    )


def host(
    host_id: str,
    *,
    at: datetime = T0,
    is_active: bool = True,
    status: HostStatus = HostStatus.UP,
    maintenance_mode: bool = False,
    maintenance_until: datetime | None = None,
    state: ComplianceState = ComplianceState.COMPLIANT,
    **attributes: Any,
) -> HostSchedule:
    return HostSchedule(
        host_id=host_id,
        next_scheduled_scan=at,
        created_at=at,
        updated_at=at,
        is_active=is_active,
        status=status,
        maintenance_mode=maintenance_mode,
        maintenance_until=maintenance_until,
        compliance_state=state,
        state=ComplianceState.MAINTENANCE if maintenance_mode else state,
        attributes=ObjectAttributes(is_active=is_active, status=status, **attributes),
    )
