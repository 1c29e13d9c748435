"""Load generators: onboard hosts, publish schedules and change the config, batched."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer

from bench.kafka_io import send_all
from kairos.floor.settings import Settings
from schemas.changes import ConfigUpdated
from schemas.config import ConfigChanges
from schemas.objects import ObjectEvent
from schemas.schedules import ScheduleUpserted
from schemas.topics import CONFIG_KEY


def host_ids(count: int, stem: str = "host") -> list[str]:
    return [f"{stem}-{number:07d}" for number in range(count)]


def host_created_records(hosts: list[str]) -> Iterator[tuple[bytes, bytes]]:
    """ObjectEvent(host, created) for each host, keyed by host id (validated once)."""
    first = True
    for host in hosts:
        value = {
            "event_id": str(uuid.uuid4()),
            "schema_version": 1,
            "object_type": "host",
            "object_id": host,
            "operation": "created",
            "occurred_at": datetime.now(UTC).isoformat(),
            "attributes": {
                "hostname": f"{host}.bench.test",
                "organization": "bench",
                "labels": {},
                "is_active": True,
                "status": "up",
            },
        }
        raw = json.dumps(value).encode()
        if first:
            ObjectEvent.model_validate_json(raw)
            first = False
        yield host.encode(), raw


async def onboard(
    producer: AIOKafkaProducer,
    settings: Settings,
    hosts: list[str],
    *,
    on_sent: Callable[[int], None] | None = None,
) -> int:
    return await send_all(
        producer, settings.topics.object_created, host_created_records(hosts), on_sent=on_sent
    )


def schedule_upserted_records(schedules: list[dict[str, Any]]) -> Iterator[tuple[bytes, bytes]]:
    """ScheduleUpserted for each schedule definition, keyed by schedule id (validated once)."""
    first = True
    for schedule in schedules:
        value = {
            "event_id": str(uuid.uuid4()),
            "schema_version": 1,
            "type": "schedule.upserted",
            "occurred_at": datetime.now(UTC).isoformat(),
            "actor": "bench",
            "schedule_id": schedule["id"],
            "schedule": schedule,
        }
        raw = json.dumps(value).encode()
        if first:
            ScheduleUpserted.model_validate_json(raw)
            first = False
        yield schedule["id"].encode(), raw


async def publish_schedules(
    producer: AIOKafkaProducer,
    settings: Settings,
    schedules: list[dict[str, Any]],
    *,
    on_sent: Callable[[int], None] | None = None,
) -> int:
    return await send_all(
        producer,
        settings.topics.schedule_changes,
        schedule_upserted_records(schedules),
        on_sent=on_sent,
    )


async def update_config(producer: AIOKafkaProducer, settings: Settings, **changes: object) -> None:
    event = ConfigUpdated(
        event_id=uuid.uuid4(),
        occurred_at=datetime.now(UTC),
        actor="bench",
        changes=ConfigChanges.model_validate(changes),
    )
    await producer.send_and_wait(
        settings.topics.schedule_changes,
        event.model_dump_json().encode(),
        key=CONFIG_KEY.encode(),
    )
