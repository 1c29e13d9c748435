"""Changes to the scheduler, its hosts and its schedules: everything on `schedule-changes`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from schemas.base import HostStatus, Message, Timestamp
from schemas.config import ConfigChanges, ScannerSpec
from schemas.schedules import (
    ScheduleBackfillRequested,
    ScheduleDeleted,
    ScheduleDisabled,
    ScheduleEnabled,
    SchedulePaused,
    ScheduleResumed,
    ScheduleTriggered,
    ScheduleUpserted,
)


class _Change(Message):
    occurred_at: Timestamp
    actor: str = Field(default="system", max_length=255)


class ConfigUpdated(_Change):
    type: Literal["config.updated"] = "config.updated"
    changes: ConfigChanges


class SchedulerToggled(_Change):
    type: Literal["scheduler.toggled"] = "scheduler.toggled"
    enabled: bool


class ScannerUpserted(_Change):
    """Registers a scanner, or replaces its entry (key `config`). Deactivating one holds its
    queued commands; none is dropped."""

    type: Literal["scanner.upserted"] = "scanner.upserted"
    scanner: ScannerSpec


class HostMaintenanceSet(_Change):
    type: Literal["host.maintenance_set"] = "host.maintenance_set"
    host_id: str = Field(min_length=1, max_length=255)
    enabled: bool
    duration_hours: int | None = Field(default=None, ge=1, le=168)


class HostScanRequested(_Change):
    """A force scan: issued now with top priority, even in maintenance."""

    type: Literal["host.scan_requested"] = "host.scan_requested"
    host_id: str = Field(min_length=1, max_length=255)


class HostStatusChanged(_Change):
    type: Literal["host.status_changed"] = "host.status_changed"
    host_id: str = Field(min_length=1, max_length=255)
    is_active: bool | None = None
    status: HostStatus | None = None


class HostsInitializeRequested(_Change):
    """Every known host that has never been scanned successfully becomes due now."""

    type: Literal["hosts.initialize_requested"] = "hosts.initialize_requested"


HostChange = HostMaintenanceSet | HostScanRequested | HostStatusChanged
GlobalChange = ConfigUpdated | SchedulerToggled | ScannerUpserted | HostsInitializeRequested

ScheduleChange = Annotated[
    ConfigUpdated
    | SchedulerToggled
    | ScannerUpserted
    | HostMaintenanceSet
    | HostScanRequested
    | HostStatusChanged
    | HostsInitializeRequested
    | ScheduleUpserted
    | ScheduleDeleted
    | ScheduleEnabled
    | ScheduleDisabled
    | SchedulePaused
    | ScheduleResumed
    | ScheduleTriggered
    | ScheduleBackfillRequested,
    Field(discriminator="type"),
]
"""On `schedule-changes`; key = host_id for host.* types, the schedule id for schedule.*
types, `config` for the rest."""
