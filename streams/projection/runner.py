"""The projector loop: consume, apply a batch in one transaction, then commit offsets.

If PostgreSQL goes away it pauses its partitions, retries with backoff and loses nothing;
scheduling runs in other consumers and never waits on it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import CommitFailedError, KafkaError

from kairos.clock import Clock
from kairos.db import DatabaseUnavailable, connect, redact
from kairos.prometheus import CounterReading, Registry
from kairos.settings import Settings
from schemas.base import Contract
from schemas.internal import CommandTimedOut, ConfigPublished
from streams import codec
from streams.codec import Undecodable
from streams.projection.writer import Change, apply

log = logging.getLogger(__name__)

MAX_BATCH = 5000
MAX_BACKOFF_SECONDS = 30.0
COMMIT_EVERY_SECONDS = 1.0
"""Offsets are committed at most this often: a restart replays at most that much, and the
version guard makes the replay harmless. Committing every poll cost more than applying."""
FETCH_MIN_BYTES = 64 * 1024
FETCH_MAX_WAIT_MS = 50
"""Fuller fetches under load, for at most 50 ms of added projection lag when idle."""


class Projector:
    """Follows Kairos' topics in its own consumer group and keeps the read model current."""

    def __init__(self, settings: Settings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        names = settings.topics
        self._decoders: dict[str, Callable[[bytes | None], Change | None]] = {
            names.host_state: _decoder(codec.host_state_changed),
            names.scan_completed: _decoder(codec.scan_completed),
            names.scan_commands: _decoder(codec.scan_command),
            names.dead_letters: _decoder(codec.dead_letter_message),
            names.host_signals: _only(CommandTimedOut, codec.host_signal),
            names.scheduler_control: _only(ConfigPublished, codec.control_message),
            names.schedules: _decoder(codec.schedule_state_changed),
            names.schedule_runs: _decoder(codec.schedule_run_recorded),
        }
        self.applied = 0
        self.skipped = 0

    def register_metrics(self, registry: Registry) -> None:
        registry.add(
            CounterReading(
                "kairos_projector_changes_applied_total",
                "Changes written to the read model.",
                read=lambda: {(): self.applied},
            )
        )
        registry.add(
            CounterReading(
                "kairos_projector_changes_skipped_total",
                "Changes older than the read model's version (replays), skipped.",
                read=lambda: {(): self.skipped},
            )
        )

    async def run(self) -> None:
        settings = self.settings
        consumer = AIOKafkaConsumer(
            *self._decoders,
            **settings.kafka_client_options(),
            group_id=f"{settings.topic_prefix}{settings.app_id}-projector",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=MAX_BATCH,
            fetch_min_bytes=FETCH_MIN_BYTES,
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        )
        await consumer.start()
        conn: psycopg.AsyncConnection | None = None
        uncommitted = False
        committed_at = time.monotonic()
        try:
            while True:
                batches = await consumer.getmany(timeout_ms=200, max_records=MAX_BATCH)
                changes = self._decode(batches)
                if changes:
                    conn = await self._apply_until_done(consumer, conn, changes)
                uncommitted = uncommitted or bool(batches)
                if uncommitted and time.monotonic() - committed_at >= COMMIT_EVERY_SECONDS:
                    await self._commit(consumer)
                    uncommitted, committed_at = False, time.monotonic()
        finally:
            # No last commit: the consumer's position may be past a batch that failed.
            if conn is not None:
                await conn.close()
            await consumer.stop()

    def _decode(self, batches: dict[Any, list[Any]]) -> list[Change]:
        changes: list[Change] = []
        for partition, records in batches.items():
            decode = self._decoders[partition.topic]
            for record in records:
                change = decode(record.value)
                if change is None:
                    self.skipped += 1
                else:
                    changes.append(change)
        return changes

    async def _apply_until_done(
        self,
        consumer: AIOKafkaConsumer,
        conn: psycopg.AsyncConnection | None,
        changes: list[Change],
    ) -> psycopg.AsyncConnection:
        backoff = 0.5
        failing = False
        while True:
            try:
                if conn is None or conn.closed:
                    conn = await connect(self.settings.database_url, timeout=5)
                summary = await apply(changes, conn)
                await self._record_progress(conn, consumer, summary.newest_event_at)
                self.applied += summary.applied
                if failing:
                    log.warning("PostgreSQL is back; projection resumed")
                    consumer.resume(*consumer.assignment())
                return conn
            except (DatabaseUnavailable, psycopg.OperationalError) as error:
                if not failing:
                    log.warning(
                        "PostgreSQL unavailable at %s (%s); projection paused, retrying",
                        redact(self.settings.database_url),
                        str(error).splitlines()[0] if str(error) else type(error).__name__,
                    )
                    failing = True
                    consumer.pause(*consumer.assignment())
                if conn is not None:
                    await conn.close()
                    conn = None
                # Polling paused partitions keeps the group membership alive while waiting.
                await consumer.getmany(timeout_ms=int(backoff * 1000))
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    async def _record_progress(
        self,
        conn: psycopg.AsyncConnection,
        consumer: AIOKafkaConsumer,
        newest_event_at: datetime | None,
    ) -> None:
        lag = 0
        for partition in consumer.assignment():
            highwater = consumer.highwater(partition)
            if highwater is not None:
                lag += max(0, highwater - await consumer.position(partition))
        now = self.clock.now()
        lag_seconds = (now - newest_event_at).total_seconds() if newest_event_at else 0.0
        await conn.execute(
            "INSERT INTO projection_progress"
            " (source, newest_event_at, applied_at, consumer_lag, lag_seconds)"
            " VALUES ('projector', %s, %s, %s, %s) ON CONFLICT (source) DO UPDATE SET"
            " newest_event_at = GREATEST(projection_progress.newest_event_at,"
            " excluded.newest_event_at), applied_at = excluded.applied_at,"
            " consumer_lag = excluded.consumer_lag, lag_seconds = excluded.lag_seconds",
            (newest_event_at, now, lag, max(0.0, lag_seconds)),
        )
        await conn.commit()

    @staticmethod
    async def _commit(consumer: AIOKafkaConsumer) -> None:
        try:
            await consumer.commit()
        except (CommitFailedError, KafkaError) as error:
            # A rebalance took partitions away; their next owner replays, idempotently.
            log.info("projector offset commit skipped: %s", error)


def _decoder(adapter: Any) -> Callable[[bytes | None], Change | None]:
    def decode(raw: bytes | None) -> Change | None:
        try:
            return codec.decode(adapter, raw)  # type: ignore[no-any-return]
        except Undecodable:
            return None

    return decode


def _only(kind: type[Contract], adapter: Any) -> Callable[[bytes | None], Change | None]:
    """Decode only records of `kind`; the others are passed over without parsing them."""
    decode = _decoder(adapter)
    tag = f'"{kind.model_fields["kind"].default}"'.encode()

    def decode_kind(raw: bytes | None) -> Change | None:
        if raw is None or tag not in raw:
            return None
        change = decode(raw)
        return change if isinstance(change, kind) else None

    return decode_kind
