"""Builders for contract messages used by integration and e2e tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from schemas.events import ObjectAttributes, ObjectEvent, ScanCompleted, ScanStatus


def now() -> datetime:
    return datetime.now(UTC)


def host_created(host_id: str, **attributes: Any) -> ObjectEvent:
    return ObjectEvent(
        event_id=uuid.uuid4(),
        object_type="host",
        object_id=host_id,
        occurred_at=now(),
        attributes=ObjectAttributes(hostname=f"{host_id}.example.test", **attributes),
    )


def scan_result(
    command: dict[str, Any], *, score: float = 100, succeeded: bool = True
) -> ScanCompleted:
    finished = now()
    return ScanCompleted(
        event_id=uuid.uuid4(),
        command_id=command["command_id"],
        host_id=command["host_id"],
        status=ScanStatus.SUCCEEDED if succeeded else ScanStatus.FAILED,
        started_at=finished,
        completed_at=finished,
        score=score if succeeded else None,
        passed=10,
        failed=0,
        scan_id=f"scan-{uuid.uuid4().hex[:8]}",
        error=None if succeeded else "scanner crashed",
    )
