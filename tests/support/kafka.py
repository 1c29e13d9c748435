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
from schemas.state import HostSchedule
from schemas.topics import CONFIG_KEY
from streams.consumer import FETCH_MAX_WAIT_MS
from streams.topology import HOSTS
from tests.support.factories import config_updated


def hosts_changelog(settings: Settings) -> str:
    """The worker's hosts table's changelog: every host's state, what the projector reads."""
    return HOSTS.changelog(settings)


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

    def host_states(self, settings: Settings, host_id: str | None = None) -> list[HostSchedule]:
        """The host states the worker wrote to its hosts changelog, in order, read with the
        contract's model (which gives back the defaults the stored state leaves out);
        tombstones (deletions) left out. Collect `hosts_changelog(settings)` for it."""
        topic = hosts_changelog(settings)
        key = None if host_id is None else json.dumps(host_id).encode()
        return [
            HostSchedule.model_validate_json(r.value)
            for r in self.records
            if r.topic == topic and r.value is not None and (key is None or r.key == key)
        ]

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


PATIENT_SCAN_TIMEOUT_SECONDS = 3600
"""The longest scan timeout the config allows: one second of wall time at an hour per second."""


async def configure(settings: Settings, producer: AIOKafkaProducer, **changes: Any) -> None:
    """Change the scheduler config, and wait until the workers are told.

    A worker turns a config change into a record on the control topic, which every worker
    reads: the wait ends once that topic carries a config with every value of `changes`, and
    the workers' fetches of it have had time to come back. Without it, hosts published next
    may be claimed under the config before.
    """
    await publish(producer, settings.topics.schedule_changes, CONFIG_KEY, config_updated(**changes))
    control = settings.topics.scheduler_control

    def published() -> bool:
        return any(
            changes.items() <= message.get("config", {}).items()
            for message in records.values(control)
        )

    async with Collector(settings, control) as records:
        await records.wait_for(published, timeout=30, what=f"the config {changes} published")
    # A worker's fetch is held up to FETCH_MAX_WAIT_MS; tansu may answer only when it ends.
    await asyncio.sleep(5 * FETCH_MAX_WAIT_MS / 1000)


async def allow_slow_answers(settings: Settings, producer: AIOKafkaProducer) -> None:
    """Raise the scan timeout to an hour, and wait until the workers are told.

    On a fast clock the default timeout of ten minutes is little wall time (167 ms at an hour
    per second): a result that takes longer than that to come back on a busy machine is late,
    the command times out and the host retries. Tests that count on every result coming back
    in time call this first; tests of the timeout itself keep the default.
    """
    await configure(settings, producer, scan_timeout_seconds=PATIENT_SCAN_TIMEOUT_SECONDS)
