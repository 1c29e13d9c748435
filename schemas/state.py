"""Per-host schedule state: kept by the worker, emitted on every change, projected."""

from __future__ import annotations

from pydantic import Field

from schemas.base import CommandReason, ComplianceState, Contract, HostStatus, Timestamp
from schemas.objects import ObjectAttributes

STATE_FORMAT = 1


class InFlightCommand(Contract):
    """The one command a host may have outstanding."""

    command_id: str
    reason: CommandReason
    priority: int
    due_at: Timestamp
    attempt: int
    claimed_at: Timestamp
    issued_at: Timestamp | None = None
    deadline: Timestamp | None = None


class HostSchedule(Contract):
    """The schedule of one host. `version` grows by one with every change."""

    format: int = STATE_FORMAT
    host_id: str
    version: int = 1
    state: ComplianceState = Field(
        default=ComplianceState.UNKNOWN,
        description="What operators see: `maintenance` while in maintenance, else compliance.",
    )
    compliance_state: ComplianceState = Field(
        default=ComplianceState.UNKNOWN, description="From the latest successful scan."
    )
    score: float | None = None
    current_interval_minutes: int = 0
    next_scheduled_scan: Timestamp
    last_scan_completed: Timestamp | None = None
    last_scan_id: str | None = None
    last_error: str | None = None
    maintenance_mode: bool = False
    maintenance_until: Timestamp | None = None
    scan_priority: int = 10
    consecutive_scan_failures: int = 0
    incarnation: str = Field(
        default="", description="Id of the event that created this host; keys command ids."
    )
    due_instance: int = Field(default=1, description="Counts scheduled scans; keys command ids.")
    attempt: int = Field(default=1, description="Attempt of the current due instance.")
    in_flight: InFlightCommand | None = None
    force_requested: bool = False
    is_active: bool = True
    status: HostStatus = HostStatus.UP
    attributes: ObjectAttributes = Field(default_factory=ObjectAttributes)
    recent_event_ids: tuple[str, ...] = Field(
        default=(), description="Fingerprints of the latest event ids applied, for dedupe."
    )
    created_at: Timestamp
    updated_at: Timestamp

    @property
    def in_flight_command_id(self) -> str | None:
        return self.in_flight.command_id if self.in_flight else None


class HostStateChanged(Contract):
    """A host's change as the read model applies it, read from the worker's hosts changelog
    (`streams.codec.host_changelog_change`). `schedule` None = host deleted; a deletion read
    from the changelog has version 0 (a tombstone carries none)."""

    host_id: str
    version: int
    schedule: HostSchedule | None
    changed_at: Timestamp
    deleted_created_at: Timestamp | None = Field(
        default=None,
        description="A deletion's: when the incarnation it ends was created (None where the"
        " record does not say).",
    )
