"""What a scanner agent reports, and the leases the HTTP gateway hands out.

An agent (through `kairos.agent` or the HTTP gateway) turns a `ScanCommand` into a
`ScanReport`; `scan_completed` turns the pair into the `ScanCompleted` Kairos reads, so both
roads publish the same message for the same answer.
"""

from __future__ import annotations

import uuid
from uuid import UUID

from pydantic import Field

from schemas.base import Contract, Timestamp
from schemas.commands import ScanCommand
from schemas.results import ScanCompleted, ScanStatus

RESULT_NAMESPACE = uuid.UUID("5d0c3a52-8a0e-4c51-9a51-6f1f0c2b8e11")


class ScanReport(Contract):
    """One scan's outcome as an agent reports it; Kairos adds the command's ids.

    `completed_at` defaults to the reporter's clock (the SDK's or the gateway's), which
    follows a sped-up scheduler clock when one is configured.
    """

    status: ScanStatus
    score: float | None = Field(default=None, ge=0, le=100)
    passed: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    severity_critical_failed: int = Field(default=0, ge=0)
    severity_high_failed: int = Field(default=0, ge=0)
    severity_medium_failed: int = Field(default=0, ge=0)
    severity_low_failed: int = Field(default=0, ge=0)
    scan_id: str | None = Field(default=None, max_length=255)
    error: str | None = Field(default=None, max_length=2000)
    started_at: Timestamp | None = None
    completed_at: Timestamp | None = None

    @classmethod
    def failure(cls, error: str) -> ScanReport:
        return cls(status=ScanStatus.FAILED, error=error)


def result_event_id(command_id: str) -> UUID:
    """The event id of the result for `command_id`: the same for every copy of the answer,
    so a result re-sent after a crash or a rebalance is recognised as the same message."""
    return uuid.uuid5(RESULT_NAMESPACE, command_id)


def scan_completed(command: ScanCommand, report: ScanReport, *, now: Timestamp) -> ScanCompleted:
    """The `scan-completed` message answering `command` with `report` (at `now` unless the
    report says when it completed)."""
    outcome = report.model_dump(include=set(ScanReport.model_fields) - {"completed_at"})
    return ScanCompleted(
        event_id=result_event_id(command.command_id),
        command_id=command.command_id,
        host_id=command.host_id,
        scanner=command.scanner,
        completed_at=report.completed_at or now,
        **outcome,
    )


class ScanResultBody(ScanReport):
    """`POST /api/agents/commands/{command_id}/result`: the report and the lease it answers."""

    lease_id: str = Field(min_length=1, max_length=64, description="From the lease answer.")


class CommandLeasePublic(Contract):
    """A command leased to one agent until `lease_expires_at`; report it with `lease_id`."""

    lease_id: str
    lease_expires_at: Timestamp = Field(
        description="Wall-clock instant after which the command may be leased to another agent."
    )
    command: ScanCommand
