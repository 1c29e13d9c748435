"""What every baseline shares: the command it emits and a batching producer."""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaProducer

COMMANDS_NAMESPACE = uuid.UUID("3d0f3b9e-5c1a-4f0e-9a55-2b7d1c9e6a01")
DEADLINE = timedelta(minutes=10)


def command_id(host_id: str, instance: int) -> str:
    return str(uuid.uuid5(COMMANDS_NAMESPACE, f"{host_id}/{instance}"))


def scan_command(
    host_id: str,
    instance: int,
    *,
    due_at: datetime,
    issued_at: datetime,
    priority: int = 10,
    state: str = "unknown",
    schedule_id: str | None = None,
    scanner: str = "compliance",
) -> bytes:
    """A ScanCommand (schemas.commands) as JSON bytes; with `schedule_id`, a schedule's."""
    reason = "unknown" if state == "unknown" else "scheduled"
    value: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "schema_version": 1,
        "command_id": command_id(f"{schedule_id}/{host_id}" if schedule_id else host_id, instance),
        "host_id": host_id,
        "scanner": scanner,
        "priority": priority,
        "reason": "schedule" if schedule_id else reason,
        "state": state,
        "due_at": due_at.isoformat(),
        "issued_at": issued_at.isoformat(),
        "deadline": (issued_at + DEADLINE).isoformat(),
        "attempt": 1,
    }
    if schedule_id is not None:
        value["schedule_id"] = schedule_id
    return json.dumps(value).encode()


def now() -> datetime:
    return datetime.now(UTC)


async def start_producer(bootstrap: str) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        max_batch_size=512 * 1024,
    )
    await producer.start()
    return producer


def say(*parts: object) -> None:
    """One status line on stdout (the bench harness reads these from the log)."""
    print(*parts, flush=True)
    sys.stdout.flush()
