"""Messages producers publish to Kairos: objects, schedule changes, scan results."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, field_validator

from schemas.base import Contract, HostStatus, Message, Timestamp
from schemas.config import ConfigChanges

ERROR_MAX_CHARS = 500
LABELS_MAX = 64
LABEL_KEY_MAX_CHARS = 128
LABEL_VALUE_MAX_CHARS = 1024
"""Labels are copied into each host's state and every state change: bounded so that no
derived record can approach Kafka's 1 MiB message limit (64 x (128 + 1024) B < 80 KiB)."""


class Operation(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"


LabelKey = Annotated[str, Field(min_length=1, max_length=LABEL_KEY_MAX_CHARS)]
LabelValue = Annotated[str, Field(max_length=LABEL_VALUE_MAX_CHARS)]
HostLabels = Annotated[
    dict[LabelKey, LabelValue],
    Field(
        max_length=LABELS_MAX,
        description=(
            f"At most {LABELS_MAX} labels, keys of 1 to {LABEL_KEY_MAX_CHARS} and values up to"
            f" {LABEL_VALUE_MAX_CHARS} characters."
        ),
    ),
]
"""A host's labels wherever they enter Kairos: bounded, since host state copies them."""


class ObjectAttributes(Contract):
    """What inventory knows of an object; all optional but activity and status."""

    hostname: str | None = Field(default=None, max_length=255)
    ip: str | None = Field(default=None, max_length=64)
    os: str | None = Field(default=None, max_length=255)
    organization: str | None = Field(default=None, max_length=255)
    labels: HostLabels = Field(default_factory=dict)
    is_active: bool = True
    status: HostStatus = HostStatus.UP



class ObjectEvent(Message):
    """On `object-created`, key = object_id. Type "host" schedules a host."""

    object_type: str = Field(min_length=1, max_length=64)
    object_id: str = Field(min_length=1, max_length=255)
    operation: Operation = Operation.CREATED
    occurred_at: Timestamp
    attributes: ObjectAttributes = Field(default_factory=ObjectAttributes)


class _Change(Message):
    occurred_at: Timestamp
    actor: str = Field(default="system", max_length=255)


class ConfigUpdated(_Change):
    type: Literal["config.updated"] = "config.updated"
    changes: ConfigChanges


class SchedulerToggled(_Change):
    type: Literal["scheduler.toggled"] = "scheduler.toggled"
    enabled: bool


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
GlobalChange = ConfigUpdated | SchedulerToggled | HostsInitializeRequested

# schemas.schedules imports this module's Operation and ObjectAttributes (defined above);
# the package __init__ always loads this module first, so the cycle resolves here.
from schemas.schedules import (  # noqa: E402
    ScheduleBackfillRequested,
    ScheduleDeleted,
    ScheduleDisabled,
    ScheduleEnabled,
    SchedulePaused,
    ScheduleResumed,
    ScheduleTriggered,
    ScheduleUpserted,
)

ScheduleChange = Annotated[
    ConfigUpdated
    | SchedulerToggled
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


class ScanStatus(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class ScanCompleted(Message):
    """On `scan-completed`, key = host_id: a scanner agent's result for one command."""

    command_id: str = Field(min_length=1, max_length=255)
    host_id: str = Field(min_length=1, max_length=255)
    scanner: str = Field(default="compliance", max_length=128)
    status: ScanStatus
    started_at: Timestamp | None = None
    completed_at: Timestamp
    score: float | None = Field(default=None, ge=0, le=100)
    passed: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    severity_critical_failed: int = Field(default=0, ge=0)
    severity_high_failed: int = Field(default=0, ge=0)
    severity_medium_failed: int = Field(default=0, ge=0)
    severity_low_failed: int = Field(default=0, ge=0)
    scan_id: str | None = Field(default=None, max_length=255)
    error: str | None = None

    @field_validator("error")
    @classmethod
    def _keep_error_short(cls, error: str | None) -> str | None:
        return None if error is None else error[:ERROR_MAX_CHARS]
