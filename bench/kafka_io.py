"""Kafka plumbing for load generators and observers: batched producers, offsets, collectors."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from kairos.floor.settings import Settings

LINGER_MS = 20
MAX_BATCH_BYTES = 512 * 1024
IN_FLIGHT_SENDS = 20_000


async def start_producer(settings: Settings, **overrides: Any) -> AIOKafkaProducer:
    """A batching producer (acks=all, idempotent like Kairos' own, lingering to fill batches)."""
    options: dict[str, Any] = {
        "acks": "all",
        "enable_idempotence": settings.kafka_idempotence,
        "linger_ms": LINGER_MS,
        "max_batch_size": MAX_BATCH_BYTES,
        "max_request_size": 4 * 1024 * 1024,
    }
    options.update(overrides)
    producer = AIOKafkaProducer(**settings.kafka_client_options(), **options)
    await producer.start()
    return producer


async def send_all(
    producer: AIOKafkaProducer,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes]],
    *,
    on_sent: Callable[[int], None] | None = None,
) -> int:
    """Publish every (key, value) without awaiting each delivery, then flush.

    `producer.send` only waits for room in the accumulator; deliveries are checked in
    groups so an error surfaces and memory stays bounded.
    """
    pending: list[asyncio.Future[Any]] = []
    count = 0
    for key, value in records:
        pending.append(await producer.send(topic, value, key=key))
        count += 1
        if len(pending) >= IN_FLIGHT_SENDS:
            await asyncio.gather(*pending)
            pending.clear()
            if on_sent:
                on_sent(count)
    await producer.flush()
    if pending:
        await asyncio.gather(*pending)
    if on_sent:
        on_sent(count)
    return count


async def admin(settings: Settings) -> AIOKafkaAdminClient:
    client = AIOKafkaAdminClient(**settings.kafka_client_options(), request_timeout_ms=30_000)
    await client.start()
    return client


async def create_topics(
    settings: Settings,
    names: dict[str, int],
    configs: dict[str, dict[str, str]] | None = None,
) -> None:
    """Create topics (name -> partitions, optional per-topic configs) unless they exist."""
    configs = configs or {}
    client = await admin(settings)
    try:
        existing = set(await client.list_topics())
        missing = [
            NewTopic(n, p, 1, topic_configs=configs.get(n, {}))
            for n, p in names.items()
            if n not in existing
        ]
        if missing:
            try:
                await client.create_topics(missing)
            except TopicAlreadyExistsError:
                pass
        for _ in range(100):
            described = await client.describe_topics(list(names))
            if all(item.get("partitions") for item in described):
                break
            await asyncio.sleep(0.1)
    finally:
        await client.close()


class Offsets:
    """End offsets of topics and committed offsets of consumer groups, polled cheaply."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._consumer = AIOKafkaConsumer(
            **settings.kafka_client_options(), group_id=None, enable_auto_commit=False
        )
        self._admin: AIOKafkaAdminClient | None = None

    async def __aenter__(self) -> Offsets:
        await self._consumer.start()
        self._admin = await admin(self.settings)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()
        if self._admin is not None:
            await self._admin.close()

    async def partitions(self, topic: str) -> list[TopicPartition]:
        for _ in range(100):
            found = self._consumer.partitions_for_topic(topic)
            if found:
                return [TopicPartition(topic, p) for p in sorted(found)]
            await self._consumer._client.force_metadata_update()  # noqa: SLF001
            await asyncio.sleep(0.1)
        raise LookupError(f"topic {topic} has no partitions")

    async def end_offsets(self, topics: Iterable[str]) -> dict[TopicPartition, int]:
        partitions: list[TopicPartition] = []
        for topic in topics:
            partitions += await self.partitions(topic)
        return dict(await self._consumer.end_offsets(partitions))

    async def total(self, topic: str) -> int:
        """Records ever written to `topic` (sum of end offsets; fresh topics start at 0)."""
        return sum((await self.end_offsets([topic])).values())

    async def lag(self, group: str, topics: Iterable[str]) -> int:
        """Records on `topics` not yet committed by consumer group `group`."""
        assert self._admin is not None
        ends = await self.end_offsets(topics)
        committed = await self._admin.list_consumer_group_offsets(group)
        lag = 0
        for partition, end in ends.items():
            meta = committed.get(partition)
            lag += end - (meta.offset if meta is not None and meta.offset >= 0 else 0)
        return lag

    async def wait_caught_up(
        self,
        group: str,
        topics: Iterable[str],
        *,
        timeout: float,
        stable_for: float = 2.5,
        on_poll: Callable[[int], None] | None = None,
    ) -> float:
        """Wait until `group` has committed everything on `topics` for `stable_for` s.

        Returns when that state began (wall time). Faust commits every second, so the
        answer is accurate to about a second.
        """
        topics = list(topics)
        deadline = time.monotonic() + timeout
        zero_since: float | None = None
        while time.monotonic() < deadline:
            lag = await self.lag(group, topics)
            if on_poll:
                on_poll(lag)
            if lag == 0:
                zero_since = zero_since or time.time()
                if time.time() - zero_since >= stable_for:
                    return zero_since
            else:
                zero_since = None
            await asyncio.sleep(0.5)
        raise TimeoutError(f"group {group} still behind on {topics} after {timeout:.0f} s")


def parse_instant(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


@dataclass
class CommandLog:
    """Every scan command seen: instants as epoch seconds, from the messages themselves."""

    command_ids: list[str] = field(default_factory=list)
    host_ids: list[str] = field(default_factory=list)
    due_at: list[float] = field(default_factory=list)
    issued_at: list[float] = field(default_factory=list)
    produced_at: list[float] = field(default_factory=list)
    received_at: list[float] = field(default_factory=list)
    schedule_ids: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.due_at)

    def add(self, command: dict[str, Any], produced_ms: int, received: float) -> None:
        self.command_ids.append(command["command_id"])
        self.host_ids.append(command["host_id"])
        self.due_at.append(parse_instant(command["due_at"]))
        self.issued_at.append(parse_instant(command["issued_at"]))
        self.produced_at.append(produced_ms / 1000.0)
        self.received_at.append(received)
        self.schedule_ids.append(command.get("schedule_id"))


class TopicWatcher:
    """Reads topics from the beginning in the background and hands every record to `handle`.

    `handle(record, received_wall_time)` may be a coroutine function.
    """

    def __init__(
        self,
        settings: Settings,
        topics: list[str],
        handle: Callable[[Any, float], Awaitable[None] | None],
    ) -> None:
        self._consumer = AIOKafkaConsumer(
            *topics,
            **settings.kafka_client_options(),
            group_id=None,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_poll_records=5000,
            fetch_max_bytes=16 * 1024 * 1024,
        )
        self._handle = handle
        self._task: asyncio.Task[None] | None = None
        self.count = 0

    async def __aenter__(self) -> TopicWatcher:
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
        while True:
            batches = await self._consumer.getmany(timeout_ms=200)
            received = time.time()
            for records in batches.values():
                for record in records:
                    self.count += 1
                    outcome = self._handle(record, received)
                    if outcome is not None:
                        await outcome


class CommandCollector(TopicWatcher):
    """Collects every scan command on `topic` into a CommandLog."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        on_command: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.log = CommandLog()
        self._on_command = on_command
        super().__init__(settings, [topic], self._collect)

    def _collect(self, record: Any, received: float) -> None:
        command = json.loads(record.value)
        self.log.add(command, record.timestamp, received)
        if self._on_command is not None:
            self._on_command(command)


async def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    poll: float = 0.1,
    on_poll: Callable[[], None] | None = None,
) -> float:
    """Poll `condition` until true; seconds taken. TimeoutError names `what`."""
    started = time.monotonic()
    while not condition():
        if on_poll:
            on_poll()
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(poll)
    if on_poll:
        on_poll()
    return time.monotonic() - started
