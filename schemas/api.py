"""API bodies and roles."""

from __future__ import annotations

from enum import IntEnum
from uuid import UUID

from pydantic import Field

from schemas.base import Contract


class Role(IntEnum):
    """Roles in increasing power; a caller may do what any lower role may."""

    GUEST = 1
    SECURITY_ANALYST = 2
    SECURITY_ADMIN = 3
    SUPER_ADMIN = 4


class Accepted(Contract):
    """A write was published as an event; it takes effect asynchronously."""

    event_id: UUID
    status: str = Field(default="accepted")


class HealthPublic(Contract):
    status: str


class ReadinessPublic(Contract):
    status: str
    kafka: str
    database: str
