"""Per-host schedule state: kept by the worker, emitted on every change, projected."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from schemas.base import (
    CommandReason,
    ComplianceState,
    Contract,
    HostStatus,
    Timestamp,
    WithdrawReason,
)
from schemas.objects import ObjectAttributes

STATE_FORMAT = 2
"""The host state's stored format. 2: fields under the short keys below (1: their names, as
the rest of the contract writes them). Either reads back as the same `HostSchedule`."""

# A worker keeps every host's stored state in memory, and the changelog holds it: the long
# field names were a large share of a new host's record.
# Dumped with `by_alias=True` only where it is stored (`streams.stages.hosts.stored_schedule`);
# every other dump, and the API, uses the names.
_IN_FLIGHT_KEYS = {
    "command_id": "c",
    "reason": "r",
    "priority": "p",
    "due_at": "d",
    "attempt": "a",
    "claimed_at": "cl",
    "issued_at": "is",
    "deadline": "dl",
    "withdrawing": "w",
}
_WITHDRAWN_KEYS = {"command_id": "c", "reason": "r", "at": "t"}
_HOST_KEYS = {
    "format": "f",
    "host_id": "h",
    "version": "v",
    "state": "s",
    "compliance_state": "cs",
    "score": "sc",
    "current_interval_minutes": "im",
    "next_scheduled_scan": "n",
    "last_scan_completed": "lc",
    "last_scan_id": "li",
    "last_error": "le",
    "maintenance_mode": "m",
    "maintenance_until": "mu",
    "scan_priority": "p",
    "consecutive_scan_failures": "cf",
    "incarnation": "in",
    "due_instance": "di",
    "attempt": "a",
    "in_flight": "if",
    "withdrawals": "wd",
    "last_withdrawn": "lw",
    "force_requested": "fr",
    "is_active": "ia",
    "status": "st",
    "attributes": "at",
    "recent_event_ids": "re",
    "created_at": "ca",
    "updated_at": "ua",
}


def _stored_keys(keys: dict[str, str]) -> ConfigDict:
    """Read by name or by short key; written by name unless asked for the short keys."""
    return ConfigDict(
        alias_generator=keys.__getitem__, validate_by_name=True, validate_by_alias=True
    )


class InFlightCommand(Contract):
    """The one command a host may have outstanding."""

    model_config = _stored_keys(_IN_FLIGHT_KEYS)

    command_id: str
    reason: CommandReason
    priority: int
    due_at: Timestamp
    attempt: int
    claimed_at: Timestamp
    issued_at: Timestamp | None = None
    deadline: Timestamp | None = None
    withdrawing: WithdrawReason | None = Field(
        default=None,
        description="The host asked the dispatcher to withdraw this claim if it still waits for"
        " a slot; the answer (`CommandWithdrawn`) or the command's end clears it.",
    )


class WithdrawnClaim(Contract):
    """The host's latest claim withdrawn before it was issued: the read model's history
    keeps each one."""

    model_config = _stored_keys(_WITHDRAWN_KEYS)

    command_id: str
    reason: WithdrawReason
    at: Timestamp


class HostSchedule(Contract):
    """The schedule of one host. `version` grows by one with every change."""

    model_config = _stored_keys(_HOST_KEYS)

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
    withdrawals: int = Field(
        default=0, description="Claims withdrawn before issue; keys command ids from the first."
    )
    last_withdrawn: WithdrawnClaim | None = None
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
