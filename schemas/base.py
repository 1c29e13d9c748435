"""Shared building blocks of the Kairos message contract (v1)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Timestamp = AwareDatetime
"""RFC 3339 instant with an offset; naive datetimes are refused."""


class Contract(BaseModel):
    """Base of every model in the contract: immutable and strict about unknown fields.

    JSON decoding caches field names only: by default pydantic also keeps the last 16,384
    string values it decoded, ids and host names that do not come again (about 1.1 MB held
    in each process)."""

    model_config = ConfigDict(frozen=True, extra="forbid", cache_strings="keys")


class Message(Contract):
    """Every message on a Kairos topic carries an idempotency key and the schema version."""

    event_id: UUID = Field(description="Idempotency key: a redelivered message keeps its id.")
    schema_version: Literal[1] = Field(default=1, description="Version of this contract.")


class ComplianceState(StrEnum):
    UNKNOWN = "unknown"
    CRITICAL = "critical"
    LOW = "low"
    PARTIAL = "partial"
    MOSTLY_COMPLIANT = "mostly_compliant"
    COMPLIANT = "compliant"
    MAINTENANCE = "maintenance"


class HostStatus(StrEnum):
    UP = "up"
    DOWN = "down"


class WithdrawReason(StrEnum):
    """Why a claim waiting for a slot was withdrawn before it was issued."""

    MAINTENANCE = "maintenance"
    DOWN = "down"
    INACTIVE = "inactive"
    DELETED = "deleted"


class CommandReason(StrEnum):
    UNKNOWN = "unknown"
    SCHEDULED = "scheduled"
    RETRY = "retry"
    FORCE = "force"
    SCHEDULE = "schedule"
    TRIGGER = "trigger"
