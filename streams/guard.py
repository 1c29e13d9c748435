"""The one dead-letter and poison guard of every stage.

A message that cannot be read, breaks a rule of the contract, or makes its handler raise goes to
`dead-letters` with the reason, and the stage goes on. Failures of the broker or of Faust are
not the message's fault: they propagate. On the batch path (the host stage's inputs, handed
over by the worker's consumer, `streams.consumer`) nothing is restarted: the consumer pauses
and handles the batch again from its first unacknowledged record. What reaches a Faust agent
instead (the dispatcher's queue) is restarted by Faust's supervisor.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.errors import KafkaError
from faust.exceptions import FaustError

from kairos.floor.clock import Clock
from streams import codec
from streams.metrics import WorkerMetrics

log = logging.getLogger(__name__)

INFRASTRUCTURE_ERRORS = (KafkaError, ConnectionError, FaustError)
"""Failures of the broker or the runtime, not of one message; never parked as poison."""

Raw = bytes | Callable[[], bytes] | None
"""A message's value, or how to encode it: one handled out of a batch is encoded only if it is
parked, which almost none is (a cron minute's due pass would otherwise encode each schedule's
signal and fan-out for nothing)."""

Origin = tuple[str, int | None, int | None, bytes | None, Raw]
"""Where a message came from: topic, partition, offset, key, raw value."""


class Guard:
    """Parks what a stage cannot handle on `dead-letters`, counted per source topic."""

    def __init__(
        self, topic: Any, clock: Clock, metrics: WorkerMetrics, counters: Counter[str]
    ) -> None:
        self._topic = topic
        self._clock = clock
        self._metrics = metrics
        self._counters = counters

    async def handled(self, origin: Origin, handling: Awaitable[None]) -> None:
        """Await `handling`; if it raises for the message's sake, park the message instead.

        Left to Faust, the exception would crash the agent, and the same message would crash
        it again after every restart.
        """
        try:
            await handling
        except INFRASTRUCTURE_ERRORS:
            raise
        except Exception as error:
            self._counters["poisoned_messages"] += 1
            log.error("message %s[%s]@%s could not be handled", *origin[:3], exc_info=error)
            await self.dead_letter(*origin, f"handling failed: {type(error).__name__}: {error}")

    async def unreadable_state(self, table: Any, key: Any, stored: Any, error: Exception) -> None:
        """A state record this worker cannot read: dead-letter it, count it, rebuild the rest.

        The record stays in the table (a newer worker may read it); the key is skipped here.
        """
        self._counters["unreadable_state_records"] += 1
        raw = stored if isinstance(stored, bytes) else str(stored).encode()
        topic = table.changelog_topic.get_topic_name()
        key_bytes = key.encode() if isinstance(key, str) else key
        reason = f"unreadable state record: {type(error).__name__}: {error}"[:2000]
        await self.dead_letter(topic, None, None, key_bytes, raw, reason)

    async def dead_letter(
        self,
        topic: str,
        partition: int | None,
        offset: int | None,
        key: bytes | None,
        raw: Raw,
        reason: str,
        part: int | None = None,
    ) -> None:
        """`part`: which message of the record, when one record carries several."""
        if callable(raw):
            raw = raw()
        self._counters["dead_letters"] += 1
        self._metrics.dead_letters.inc(1, topic)
        letter = codec.dead_letter(
            source_topic=topic,
            partition=partition,
            offset=offset,
            key=key,
            raw=raw,
            error=reason,
            received_at=self._clock.now(),
            part=part,
        )
        log.warning("dead letter from %s[%s]@%s: %s", topic, partition, offset, reason)
        await self._topic.send(key=key, value=codec.encode(letter))
