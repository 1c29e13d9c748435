"""Messages Kairos publishes: scan commands for agents and dead letters for operators."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from schemas.base import CommandReason, ComplianceState, Contract, Message, Timestamp
from schemas.config import ADAPTIVE_SCANNER as ADAPTIVE_SCANNER


class ScanCommand(Message):
    """On `scan-commands`, key = host_id. Agents dedupe on command_id."""

    command_id: str
    host_id: str
    scanner: str = ADAPTIVE_SCANNER
    priority: int = Field(ge=1, le=10)
    reason: CommandReason
    state: ComplianceState
    due_at: Timestamp
    issued_at: Timestamp
    deadline: Timestamp
    attempt: int = Field(ge=1)
    schedule_id: str | None = None
    args: dict[str, Any] | None = None


class DeadLetter(Message):
    """On `dead-letters`, key = the original key: a message Kairos could not accept."""

    source_topic: str
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    error: str
    raw: str = Field(description="The original value, decoded as UTF-8 with replacement.")
    received_at: Timestamp


class Rejection(Contract):
    """A rule refused an input; the reason travels to dead-letters."""

    reason: str
