"""Input records on another partition than their key's: forwarded there before anything else.

The host-keyed topics (object-created, schedule-changes, scan-completed, kairos-host-signals)
are co-partitioned only if every producer maps a key to the same partition. Kafka's Java
client, aiokafka and kafka-python use murmur2; librdkafka (kcat, confluent-kafka-python, Go,
.NET, node-rdkafka) defaults to `consistent_random` (CRC32), and other clients may pick
partitions by another hash, at random or round-robin. A host's state lives on its key's
murmur2 partition (`streams.partition_index.key_partition`), so a keyed record found anywhere
else is produced again, same key, value and headers, to that partition of the same topic, and
is not handled where it landed; it is handled when it is read there. Its offset is committed
like any other handled record's, after Faust has flushed the producer and the worker has read
every answer (`streams.consumer.WorkerConsumer._commit`): never before the forward is
acknowledged. A forward sent again after a crash is a redelivery, which the policies absorb
by the input's `event_id` (docs/messages.md, "Producers").

Not checked: records without a key (handled where they land, as before: `HostsDue`,
`SchedulesDue` and batched fan-outs are sent to chosen partitions without one), and the
keyed `ScheduleFanOut` signals, which the schedule stage sends to each partition holding a
run's targets, keyed by schedule id.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable

from kairos.floor.prometheus import Counter
from streams.partition_index import murmur2

log = logging.getLogger(__name__)

FAN_OUT_PREFIX = b'{"kind":"schedule.fanout'
"""How a `ScheduleFanOut` (or a batch of them) on kairos-host-signals begins: placed by the
schedule stage on the partition whose hosts it selects, whatever its key."""
LOG_EVERY_SECONDS = 300.0
"""One line per topic and producer pattern at most this often (the first one at once)."""


def forward_partition(key: bytes | None, partitions: int, landed: int) -> int | None:
    """Where a record keyed `key` found on partition `landed` of a topic of `partitions`
    partitions must go: its key's murmur2 partition; None when it is there already, or has no
    key (a keyless record is handled where it lands)."""
    if key is None:
        return None
    target = (murmur2(key) & 0x7FFFFFFF) % partitions
    return None if target == landed else target


def _fnv1a(key: bytes) -> int:
    h = 0x811C9DC5
    for byte in key:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def guess_partitioner(key: bytes, partitions: int, landed: int) -> str:
    """Which producer partitioner would have put `key` on `landed`: a guess, for the log (one
    partition in `partitions` matches any of them by chance)."""
    if zlib.crc32(key) % partitions == landed:
        return "CRC32 of the key (librdkafka's default, consistent_random)"
    fnv = _fnv1a(key)
    if fnv % partitions == landed:
        return "FNV-1a of the key (librdkafka's fnv1a partitioner)"
    signed = fnv - (1 << 32) if fnv & 0x80000000 else fnv
    if abs(signed) % partitions == landed:  # Go's int32 remainder, made positive.
        return "FNV-1a of the key, signed (Sarama's hash partitioner)"
    return "no hash of the key known here (random, round-robin or chosen partitions)"


class Router:
    """Decides, for each input record, whether it is forwarded; counts and logs the forwards."""

    def __init__(
        self,
        *,
        partitions: int,
        host_signals: str,
        forwarded: Counter,
        clock: Callable[[], float] = time.monotonic,
        log_every: float = LOG_EVERY_SECONDS,
    ) -> None:
        self.partitions = partitions
        self._host_signals = host_signals
        self._forwarded = forwarded
        self._clock = clock
        self._log_every = log_every
        self._patterns: dict[tuple[str, str], list[float]] = {}
        """By topic and guessed partitioner: [when last logged, forwards since]."""

    def destination(
        self, topic: str, landed: int, key: bytes | None, value: bytes | None
    ) -> int | None:
        """The partition a record read from `topic`/`landed` is forwarded to; None: it is
        handled here."""
        if key is None:
            return None
        partitions = self.partitions
        target = (murmur2(key) & 0x7FFFFFFF) % partitions
        if target == landed:
            return None
        if topic == self._host_signals and value is not None and value.startswith(FAN_OUT_PREFIX):
            return None
        self._forwarded.inc(1, topic)
        self._note(topic, landed, target, key)
        return target

    def _note(self, topic: str, landed: int, target: int, key: bytes) -> None:
        guess = guess_partitioner(key, self.partitions, landed)
        now = self._clock()
        pattern = self._patterns.get((topic, guess))
        if pattern is None:
            pattern = self._patterns[topic, guess] = [now - self._log_every, 0.0]
        pattern[1] += 1
        if now - pattern[0] < self._log_every:
            return
        log.warning(
            "%s: %d record(s) found off their key's partition and forwarded to it (last: key %r"
            " on partition %d, its murmur2 partition %d); the producer's partitioner looks like"
            " %s. Producers on librdkafka avoid the extra hop with partitioner=murmur2_random",
            topic,
            int(pattern[1]),
            key[:64],
            landed,
            target,
            guess,
        )
        pattern[0], pattern[1] = now, 0.0
