"""What scanner agents publish to Kairos: the `scan-completed` message."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, field_validator

from schemas.base import Message, Timestamp

ERROR_MAX_CHARS = 500


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
