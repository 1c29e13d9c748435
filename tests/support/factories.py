"""Builders for contract messages used by integration and e2e tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.base import CommandReason, ComplianceState
from schemas.changes import ConfigUpdated, HostMaintenanceSet, HostScanRequested, SchedulerToggled
from schemas.commands import ScanCommand
from schemas.config import ConfigChanges
from schemas.objects import ObjectAttributes, ObjectEvent, Operation
from schemas.results import ScanCompleted, ScanStatus
from schemas.schedules import (
    Schedule,
    ScheduleBackfillRequested,
    ScheduleEnabled,
    SchedulePaused,
    ScheduleResumed,
    ScheduleTriggered,
    ScheduleUpserted,
)
from schemas.state import HostSchedule, HostStateChanged

HOSTS_CREATED_AT = datetime(2020, 1, 1, tzinfo=UTC)


def now() -> datetime:
    return datetime.now(UTC)


def host_state_changed(
    host_id: str, version: int, *, at: datetime, **fields: Any
) -> HostStateChanged:
    """A host's schedule as the worker publishes it for the projector, changed at `at`, next
    scan an hour after; `fields` set any other schedule field. Its `created_at` is the same for
    every change unless set: a host created again is told apart by it (a new incarnation)."""
    values: dict[str, Any] = {
        "next_scheduled_scan": at + timedelta(hours=1),
        "created_at": HOSTS_CREATED_AT,
        "updated_at": at,
        **fields,
    }
    schedule = HostSchedule(host_id=host_id, version=version, **values)
    return HostStateChanged(host_id=host_id, version=version, schedule=schedule, changed_at=at)


def host_created(host_id: str, **attributes: Any) -> ObjectEvent:
    return ObjectEvent(
        event_id=uuid.uuid4(),
        object_type="host",
        object_id=host_id,
        occurred_at=now(),
        attributes=ObjectAttributes(hostname=f"{host_id}.example.test", **attributes),
    )


def scan_result(
    command: dict[str, Any], *, score: float = 100, succeeded: bool = True
) -> ScanCompleted:
    finished = now()
    return ScanCompleted(
        event_id=uuid.uuid4(),
        command_id=command["command_id"],
        host_id=command["host_id"],
        status=ScanStatus.SUCCEEDED if succeeded else ScanStatus.FAILED,
        started_at=finished,
        completed_at=finished,
        score=score if succeeded else None,
        passed=10,
        failed=0,
        scan_id=f"scan-{uuid.uuid4().hex[:8]}",
        error=None if succeeded else "scanner crashed",
    )


def scan_command(command_id: str, host_id: str = "h-1", *, issued_at: datetime) -> ScanCommand:
    """A scheduled command of the adaptive scanner, as the dispatcher publishes it."""
    return ScanCommand(
        event_id=uuid.uuid4(),
        command_id=command_id,
        host_id=host_id,
        priority=5,
        reason=CommandReason.SCHEDULED,
        state=ComplianceState.LOW,
        due_at=issued_at,
        issued_at=issued_at,
        deadline=issued_at + timedelta(minutes=10),
        attempt=1,
    )


def _change_fields() -> dict[str, Any]:
    return {"event_id": uuid.uuid4(), "occurred_at": now(), "actor": "tests"}


def host_deleted(host_id: str) -> ObjectEvent:
    return ObjectEvent(
        event_id=uuid.uuid4(),
        object_type="host",
        object_id=host_id,
        operation=Operation.DELETED,
        occurred_at=now(),
    )


def config_updated(**changes: Any) -> ConfigUpdated:
    return ConfigUpdated(**_change_fields(), changes=ConfigChanges(**changes))


def scheduler_toggled(enabled: bool) -> SchedulerToggled:
    return SchedulerToggled(**_change_fields(), enabled=enabled)


def maintenance_set(host_id: str, *, enabled: bool, hours: int | None = None) -> HostMaintenanceSet:
    return HostMaintenanceSet(
        **_change_fields(), host_id=host_id, enabled=enabled, duration_hours=hours
    )


def scan_requested(host_id: str) -> HostScanRequested:
    return HostScanRequested(**_change_fields(), host_id=host_id)


def host_updated(host_id: str, **attributes: Any) -> ObjectEvent:
    return ObjectEvent(
        event_id=uuid.uuid4(),
        object_type="host",
        object_id=host_id,
        operation=Operation.UPDATED,
        occurred_at=now(),
        attributes=ObjectAttributes(hostname=f"{host_id}.example.test", **attributes),
    )


def schedule_upserted(schedule_id: str, **fields: Any) -> ScheduleUpserted:
    """An upsert of a schedule running `nmap` hourly on every host, with `fields` changed."""
    values: dict[str, Any] = {
        "id": schedule_id,
        "name": schedule_id,
        "scanner": "nmap",
        "recurrence": {"kind": "cron", "expression": "0 * * * *"},
    }
    schedule = Schedule.model_validate(values | fields)
    return ScheduleUpserted(**_change_fields(), schedule_id=schedule_id, schedule=schedule)


def schedule_paused(schedule_id: str) -> SchedulePaused:
    return SchedulePaused(**_change_fields(), schedule_id=schedule_id)


def schedule_resumed(schedule_id: str) -> ScheduleResumed:
    return ScheduleResumed(**_change_fields(), schedule_id=schedule_id)


def schedule_enabled(schedule_id: str) -> ScheduleEnabled:
    return ScheduleEnabled(**_change_fields(), schedule_id=schedule_id)


def schedule_triggered(schedule_id: str) -> ScheduleTriggered:
    return ScheduleTriggered(**_change_fields(), schedule_id=schedule_id)


def backfill_requested(
    schedule_id: str, start: datetime, end: datetime
) -> ScheduleBackfillRequested:
    return ScheduleBackfillRequested(
        **_change_fields(), schedule_id=schedule_id, start=start, end=end
    )
