"""The one way the API writes: events on the contract's topics (`schedule-changes`,
`object-created`, and `scan-completed` for the agent gateway), acknowledged by all in-sync
replicas, within a timeout.

The producer starts in the lifespan. If Kafka is down then, the API still starts and the
producer is started again on the next write (or readiness check), so a broker that comes up
late is picked up without a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from api.errors import KafkaUnavailable
from kairos.floor.settings import Settings
from schemas.api import Accepted
from schemas.changes import HostChange, ScheduleChange
from schemas.objects import ObjectEvent
from schemas.results import ScanCompleted
from schemas.topics import ACTOR_HEADER, CONFIG_KEY

log = logging.getLogger(__name__)


def key_of(change: ScheduleChange) -> str:
    """host_id for host.* changes, the schedule id for schedule.* ones, `config` for the rest."""
    if isinstance(change, HostChange):
        return change.host_id
    schedule_id: str | None = getattr(change, "schedule_id", None)
    return schedule_id if schedule_id is not None else CONFIG_KEY


class Publisher:
    def __init__(self, settings: Settings, *, timeout: float) -> None:
        self._settings = settings
        self._timeout = timeout
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    @property
    def _where(self) -> str:
        return f"Kafka at {self._settings.kafka_bootstrap_servers}"

    async def start(self) -> None:
        """Start the producer if Kafka answers; log and carry on if it does not."""
        try:
            await self._ready()
        except KafkaUnavailable as error:
            log.warning("%s; writes answer 503 until it is reachable", error)

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await _stop_quietly(producer, self._timeout)

    async def _ready(self) -> AIOKafkaProducer:
        async with self._lock:
            if self._producer is not None:
                return self._producer
            producer = AIOKafkaProducer(
                **self._settings.kafka_client_options(),
                acks="all",
                enable_idempotence=self._settings.kafka_idempotence,
                request_timeout_ms=int(self._timeout * 1000),
                retry_backoff_ms=100,
                linger_ms=0,
            )
            try:
                await asyncio.wait_for(producer.start(), self._timeout)
            except (TimeoutError, KafkaError, OSError) as error:
                await _stop_quietly(producer, 1.0)
                raise KafkaUnavailable(
                    f"{self._where} is not reachable: {_described(error)}"
                ) from None
            self._producer = producer
            return producer

    async def publish(self, change: ScheduleChange) -> Accepted:
        """Send `change` and wait for the broker's acknowledgement, or KafkaUnavailable."""
        topic = self._settings.topics.schedule_changes
        await self._send(topic, change.model_dump_json().encode(), key_of(change))
        return Accepted(event_id=change.event_id)

    async def publish_object(self, event: ObjectEvent, *, actor: str | None = None) -> Accepted:
        """Send an inventory event on `object-created`, keyed by its object id. `actor` (the
        token that asked) travels in the ACTOR_HEADER: the contract has no field for it."""
        topic = self._settings.topics.object_created
        await self._send(topic, event.model_dump_json().encode(), event.object_id, actor=actor)
        return Accepted(event_id=event.event_id)

    async def republish(self, topic: str, value: bytes, key: str | None) -> tuple[int, int]:
        """Send `value` as it is to `topic` with `key` (a dead letter sent again), acknowledged;
        returns the record's (partition, offset)."""
        producer = await self._ready()
        try:
            sent = await asyncio.wait_for(
                producer.send_and_wait(topic, value, key=None if key is None else key.encode()),
                self._timeout,
            )
        except (TimeoutError, KafkaError, OSError) as error:
            raise KafkaUnavailable(
                f"{self._where} did not acknowledge the record on {topic} within "
                f"{self._timeout:g}s ({_described(error)}); it may not have been published"
            ) from None
        return sent.partition, sent.offset

    async def _send(self, topic: str, value: bytes, key: str, *, actor: str | None = None) -> None:
        producer = await self._ready()
        headers = None if actor is None else [(ACTOR_HEADER, actor.encode())]
        try:
            await asyncio.wait_for(
                producer.send_and_wait(topic, value, key=key.encode(), headers=headers),
                self._timeout,
            )
        except (TimeoutError, KafkaError, OSError) as error:
            raise KafkaUnavailable(
                f"{self._where} did not acknowledge the change on {topic} within "
                f"{self._timeout:g}s ({_described(error)}); it may not have been published"
            ) from None

    async def publish_result(self, result: ScanCompleted) -> None:
        """Send a scanner agent's result on `scan-completed` (key = host_id), acknowledged."""
        producer = await self._ready()
        topic = self._settings.topics.scan_completed
        try:
            await asyncio.wait_for(
                producer.send_and_wait(
                    topic, result.model_dump_json().encode(), key=result.host_id.encode()
                ),
                self._timeout,
            )
        except (TimeoutError, KafkaError, OSError) as error:
            raise KafkaUnavailable(
                f"{self._where} did not acknowledge the result on {topic} within "
                f"{self._timeout:g}s ({_described(error)}); report it again"
            ) from None

    async def publish_objects(
        self, events: Sequence[ObjectEvent], *, batch_size: int, actor: str | None = None
    ) -> int:
        """Send `events` on `object-created` (key = object id), `batch_size` at a time.

        Each batch is handed to the producer without waiting per record, then awaited whole
        (acknowledged by all in-sync replicas) before the next one starts. Returns the number
        of batches; KafkaUnavailable names how many batches were acknowledged before it.
        """
        producer = await self._ready()
        topic = self._settings.topics.object_created
        headers = None if actor is None else [(ACTOR_HEADER, actor.encode())]
        batches = 0
        for start in range(0, len(events), batch_size):
            chunk = events[start : start + batch_size]
            try:
                sent = [
                    await producer.send(
                        topic,
                        event.model_dump_json().encode(),
                        key=event.object_id.encode(),
                        headers=headers,
                    )
                    for event in chunk
                ]
                await asyncio.wait_for(asyncio.gather(*sent), self._timeout)
            except (TimeoutError, KafkaError, OSError) as error:
                raise KafkaUnavailable(
                    f"{self._where} did not acknowledge host batch {batches + 1} on {topic} "
                    f"within {self._timeout:g}s ({_described(error)}); {batches} of "
                    f"{-(-len(events) // batch_size)} batches were published"
                ) from None
            batches += 1
        return batches

    async def check(self) -> str:
        """ "ok" when the broker answers and the schedule-changes topic exists, else why not."""
        try:
            producer = await self._ready()
            metadata = await asyncio.wait_for(producer.client.fetch_all_metadata(), self._timeout)
        except KafkaUnavailable as error:
            return str(error)
        except (TimeoutError, KafkaError, OSError) as error:
            return f"{self._where} did not answer: {_described(error)}"
        topic = self._settings.topics.schedule_changes
        if topic not in metadata.topics():
            return f"topic {topic} does not exist; start a worker or `kairos worker` once"
        return "ok"


def _described(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


async def _stop_quietly(producer: AIOKafkaProducer, timeout: float) -> None:
    try:
        await asyncio.wait_for(producer.stop(), timeout)
    except Exception:  # noqa: BLE001 - a producer that failed to start may fail to stop
        log.debug("producer did not stop cleanly", exc_info=True)
