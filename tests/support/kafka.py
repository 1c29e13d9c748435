"""Test-side Kafka helpers: publish contract models, collect what Kairos emits."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from pydantic import BaseModel

from kairos.floor.settings import Settings


async def start_producer(settings: Settings, **options: Any) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        **settings.kafka_client_options(),
        acks="all",
        enable_idempotence=settings.kafka_idempotence,
        linger_ms=5,
        **options,
    )
    await producer.start()
    return producer


async def publish(
    producer: AIOKafkaProducer, topic: str, key: str | None, value: BaseModel | bytes
) -> None:
    raw = value if isinstance(value, bytes) else value.model_dump_json().encode()
    await producer.send_and_wait(topic, raw, key=key.encode() if key is not None else None)


class Collector:
    """Reads topics from the beginning in the background and keeps every record."""

    def __init__(self, settings: Settings, *topics: str) -> None:
        self._consumer = AIOKafkaConsumer(
            *topics,
            **settings.kafka_client_options(),
            group_id=None,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        self.records: list[Any] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Collector:
        await self._consumer.start()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        await self._consumer.stop()

    async def _run(self) -> None:
        async for record in self._consumer:
            self.records.append(record)

    def values(self, topic: str) -> list[dict[str, Any]]:
        return [json.loads(r.value) for r in self.records if r.topic == topic]

    async def wait_for(
        self,
        condition: Callable[[], bool],
        *,
        timeout: float,
        what: str,
    ) -> float:
        """Wait until `condition()` holds; return the seconds it took."""
        started = time.monotonic()
        while not condition():
            if time.monotonic() - started > timeout:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.05)
        return time.monotonic() - started


async def wait_until(condition: Callable[[], object], *, timeout: float, what: str) -> None:
    """Poll `condition` until it holds, or fail naming `what` was awaited."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)
