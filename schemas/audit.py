"""The audit trail and dead-letter redrives as the API serves them."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic import Field

from schemas.base import Contract, Timestamp


class AuditEntryPublic(Contract):
    """One change: who made it, when, and to what."""

    event_id: UUID = Field(description="The change's event id (a token change: the row's own).")
    at: Timestamp
    actor: str | None = Field(
        description="The token name that asked; `kairos` for Kairos' own changes; null for an"
        " inventory event from a producer that names no one."
    )
    type: str = Field(description="The change type: `schedule.paused`, `host.created`, …")
    subject_kind: str = Field(description="host, schedule, config, scanner, token or dead_letter.")
    subject_id: str
    summary: dict[str, Any] = Field(description="What the change set, compactly.")


class AuditPublic(Contract):
    data: list[AuditEntryPublic]
    count: int = Field(description="Rows matching the filters.")
    next_cursor: str | None = None


class RedriveRequest(Contract):
    """The record to send instead of the dead letter's; absent: the original, unchanged."""

    body: dict[str, Any] | None = Field(
        default=None,
        description="A corrected message, validated against the source topic's contract.",
    )


class RedrivePublic(Contract):
    """A dead letter sent again to its source topic."""

    event_id: UUID = Field(description="The dead letter's id.")
    topic: str
    key: str | None
    partition: int
    offset: int
    redrive_event_id: str = Field(
        description="The republished message's event id, or topic/partition/offset when it"
        " has none."
    )
    redriven_at: Timestamp
    redriven_by: str
