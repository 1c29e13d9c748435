"""Builders for the unit tests of the scheduling policy and the contract.

Every builder returns a fresh, immutable value; nothing here is shared between tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.base import CommandReason, ComplianceState, HostStatus
from schemas.changes import HostMaintenanceSet, HostScanRequested, HostStatusChanged
from schemas.config import SchedulerConfig
from schemas.internal import (
    CommandIssued,
    CommandTimedOut,
    DispatchRequested,
    HostDue,
    HostReplanRequested,
    IssuedBeforeForce,
)
from schemas.objects import ObjectAttributes, ObjectEvent, Operation
from schemas.results import ScanCompleted, ScanStatus
from schemas.state import HostSchedule
from streams.policy.host import Decision, HostInput, decide
from streams.policy.ids import message_id

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOST = "host-0001"
DEFAULT_CONFIG = SchedulerConfig()
DEFAULT_TIMEOUT = timedelta(seconds=DEFAULT_CONFIG.scan_timeout_seconds)


def new_event_id() -> uuid.UUID:
    return uuid.uuid4()


# --- inputs -----------------------------------------------------------------------


def host_created(
    host_id: str = HOST,
    *,
    at: datetime = NOW,
    event_id: uuid.UUID | None = None,
    object_type: str = "host",
    **attributes: Any,
) -> ObjectEvent:
    return ObjectEvent(
        event_id=event_id or new_event_id(),
        object_type=object_type,
        object_id=host_id,
        operation=Operation.CREATED,
        occurred_at=at,
        attributes=ObjectAttributes(**attributes),
    )


def host_deleted(host_id: str = HOST, *, at: datetime = NOW) -> ObjectEvent:
    return ObjectEvent(
        event_id=new_event_id(),
        object_type="host",
        object_id=host_id,
        operation=Operation.DELETED,
        occurred_at=at,
    )


def scan_succeeded(
    command_id: str,
    *,
    completed_at: datetime,
    host_id: str = HOST,
    score: float | None = 100.0,
    critical: int = 0,
    high: int = 0,
    scan_id: str = "scan-1",
    event_id: uuid.UUID | None = None,
) -> ScanCompleted:
    return ScanCompleted(
        event_id=event_id or new_event_id(),
        command_id=command_id,
        host_id=host_id,
        status=ScanStatus.SUCCEEDED,
        completed_at=completed_at,
        score=score,
        severity_critical_failed=critical,
        severity_high_failed=high,
        scan_id=scan_id,
    )


def scan_failed(
    command_id: str,
    *,
    completed_at: datetime,
    host_id: str = HOST,
    error: str | None = "agent crashed",
) -> ScanCompleted:
    return ScanCompleted(
        event_id=new_event_id(),
        command_id=command_id,
        host_id=host_id,
        status=ScanStatus.FAILED,
        completed_at=completed_at,
        error=error,
    )


def maintenance_set(
    *,
    enabled: bool,
    duration_hours: int | None = None,
    host_id: str = HOST,
    at: datetime = NOW,
) -> HostMaintenanceSet:
    return HostMaintenanceSet(
        event_id=new_event_id(),
        occurred_at=at,
        host_id=host_id,
        enabled=enabled,
        duration_hours=duration_hours,
    )


def scan_requested(host_id: str = HOST, *, at: datetime = NOW) -> HostScanRequested:
    return HostScanRequested(event_id=new_event_id(), occurred_at=at, host_id=host_id)


def status_changed(
    host_id: str = HOST,
    *,
    is_active: bool | None = None,
    status: HostStatus | None = None,
    at: datetime = NOW,
) -> HostStatusChanged:
    return HostStatusChanged(
        event_id=new_event_id(),
        occurred_at=at,
        host_id=host_id,
        is_active=is_active,
        status=status,
    )


def command_issued(
    command_id: str,
    *,
    at: datetime,
    host_id: str = HOST,
    timeout: timedelta = DEFAULT_TIMEOUT,
) -> CommandIssued:
    return CommandIssued(
        host_id=host_id, command_id=command_id, issued_at=at, deadline=at + timeout
    )


def issued_before_force(
    command_id: str, *, host_id: str = HOST, incarnation: str | None = None
) -> IssuedBeforeForce:
    """The dispatcher's answer to a force request for a command already out."""
    return IssuedBeforeForce(
        event_id=message_id("issued-before-force", command_id),
        host_id=host_id,
        command_id=command_id,
        incarnation=incarnation,
    )


def command_timed_out(
    command_id: str, *, deadline: datetime, host_id: str = HOST
) -> CommandTimedOut:
    return CommandTimedOut(host_id=host_id, command_id=command_id, deadline=deadline)


def host_due(host_id: str = HOST, *, at: datetime) -> HostDue:
    return HostDue(host_id=host_id, wake_at=at)


def replan(
    host_id: str = HOST, *, config_version: int = 1, initialize: bool = False
) -> HostReplanRequested:
    return HostReplanRequested(
        host_id=host_id, config_version=config_version, initialize=initialize
    )


def dispatch_request(
    command_id: str,
    *,
    priority: int = 5,
    due_at: datetime = NOW,
    host_id: str | None = None,
    reason: CommandReason = CommandReason.SCHEDULED,
    attempt: int = 1,
) -> DispatchRequested:
    return DispatchRequested(
        command_id=command_id,
        host_id=host_id or f"host-of-{command_id}",
        priority=priority,
        due_at=due_at,
        reason=reason,
        state=ComplianceState.PARTIAL,
        attempt=attempt,
    )


# --- schedules ----------------------------------------------------------------------


def onboarded(
    host_id: str = HOST, *, at: datetime = NOW, config: SchedulerConfig = DEFAULT_CONFIG
) -> HostSchedule:
    """A host just created: unknown, claimed at once, not issued yet."""
    schedule = decide(None, host_created(host_id, at=at), now=at, config=config).schedule
    assert schedule is not None
    return schedule


def issued(
    schedule: HostSchedule, *, at: datetime, config: SchedulerConfig = DEFAULT_CONFIG
) -> HostSchedule:
    """`schedule` after the dispatcher issued its in-flight command at `at`."""
    assert schedule.in_flight is not None
    decision = decide(
        schedule,
        command_issued(schedule.in_flight.command_id, at=at, host_id=schedule.host_id),
        now=at,
        config=config,
    )
    assert decision.schedule is not None
    return decision.schedule


def scanned(
    host_id: str = HOST,
    *,
    score: float = 100.0,
    critical: int = 0,
    high: int = 0,
    completed_at: datetime = NOW,
    config: SchedulerConfig = DEFAULT_CONFIG,
) -> HostSchedule:
    """A host onboarded five minutes before `completed_at` whose first scan succeeded then."""
    start = completed_at - timedelta(minutes=5)
    schedule = issued(onboarded(host_id, at=start, config=config), at=start, config=config)
    assert schedule.in_flight is not None
    result = scan_succeeded(
        schedule.in_flight.command_id,
        host_id=host_id,
        completed_at=completed_at,
        score=score,
        critical=critical,
        high=high,
    )
    after = decide(schedule, result, now=completed_at, config=config).schedule
    assert after is not None
    return after


def claimed_at(schedule: HostSchedule, now: datetime, config: SchedulerConfig) -> HostSchedule:
    """`schedule` after a HostDue signal at `now`."""
    after = decide(schedule, host_due(schedule.host_id, at=now), now=now, config=config).schedule
    assert after is not None
    return after


def fold(
    inputs: Iterable[tuple[datetime, HostInput]],
    *,
    config: SchedulerConfig = DEFAULT_CONFIG,
    schedule: HostSchedule | None = None,
) -> tuple[HostSchedule | None, Sequence[Decision]]:
    """Fold timed inputs from `schedule`, returning the final state and every decision."""
    decisions: list[Decision] = []
    for now, event in inputs:
        decision = decide(schedule, event, now=now, config=config)
        decisions.append(decision)
        schedule = decision.schedule
    return schedule, decisions
