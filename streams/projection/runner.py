"""The projector loop: consume, apply a batch in one transaction, then commit offsets.

If PostgreSQL goes away it pauses its partitions, retries with backoff and loses nothing;
scheduling runs in other consumers and never waits on it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from kairos.floor.clock import Clock
from kairos.floor.db import DatabaseUnavailable, connect, redact
from kairos.floor.prometheus import CounterReading, Registry
from kairos.floor.settings import Settings
from schemas.base import Contract
from schemas.commands import ADAPTIVE_SCANNER
from schemas.internal import CommandTimedOut, ConfigPublished
from schemas.results import ScanCompleted, ScanStatus
from streams import codec
from streams.codec import Undecodable
from streams.projection import audit, trends
from streams.projection.alert_round import AlertRound
from streams.projection.audit import AuditEntry
from streams.projection.progress import ProgressRecorder
from streams.projection.writer import BatchSummary, Change, apply, event_time
from streams.topology import HOSTS

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
        self._decoders: dict[str, Callable[[Any], Change | AuditEntry | None]] = {
            # Each host's schedule as its worker's table keeps it: the changelog is the one
            # record of a host's change (streams.codec.host_changelog_change).
            HOSTS.changelog(settings): _host_changelog,
            names.scan_completed: _decoder(codec.scan_completed),
            names.scan_commands: _decoder(codec.scan_command),
            names.dead_letters: _decoder(codec.dead_letter_message),
            names.host_signals: _only(CommandTimedOut, codec.host_signal),
            names.scheduler_control: _only(ConfigPublished, codec.control_message),
            names.schedules: _decoder(codec.schedule_state_changed),
            names.schedule_runs: _decoder(codec.schedule_run_recorded),
            # Every change, from whichever producer, becomes an audit row.
            names.schedule_changes: audit.decode_change,
            names.object_created: audit.decode_object,
        }
        self.applied = 0
        self.skipped = 0
        self.alert_round = AlertRound(settings, clock)
        self._progress = ProgressRecorder(clock)

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
        registry.add(
            CounterReading(
                "kairos_alerts_total",
                "Alerts raised and resolved by this projector.",
                ("change",),
                read=lambda: {
                    ("raised",): self.alert_round.raised,
                    ("resolved",): self.alert_round.resolved,
                },
            )
        )
        registry.add(
            CounterReading(
                "kairos_alerts_published_total",
                "Alert changes acknowledged on the alerts topic.",
                read=lambda: {(): self.alert_round.published},
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
        producer = AIOKafkaProducer(
            **settings.kafka_client_options(),
            acks="all",
            enable_idempotence=settings.kafka_idempotence,
        )
        await consumer.start()
        try:
            await producer.start()
        except BaseException:
            await consumer.stop()
            raise
        conn: psycopg.AsyncConnection | None = None
        uncommitted = False
        committed_at = time.monotonic()
        try:
            while True:
                batches = await consumer.getmany(timeout_ms=200, max_records=MAX_BATCH)
                changes, newest = self._decode(batches)
                if changes:
                    conn = await self._apply_until_done(consumer, conn, changes, newest)
                conn = await self.alert_round.run(conn, producer, await self._lag(consumer))
                uncommitted = uncommitted or bool(batches)
                if uncommitted and time.monotonic() - committed_at >= COMMIT_EVERY_SECONDS:
                    await self._commit(consumer)
                    uncommitted, committed_at = False, time.monotonic()
        finally:
            # No last commit: the consumer's position may be past a batch that failed.
            if conn is not None:
                await conn.close()
            await producer.stop()
            await consumer.stop()

    def _decode(
        self, batches: dict[TopicPartition, list[Any]]
    ) -> tuple[list[Change | AuditEntry], dict[TopicPartition, datetime]]:
        """The batch's changes, and the time of the newest change read from each partition."""
        changes: list[Change | AuditEntry] = []
        newest: dict[TopicPartition, datetime] = {}
        for partition, records in batches.items():
            decode = self._decoders[partition.topic]
            for record in records:
                change = decode(record)
                if change is None:
                    self.skipped += 1
                    continue
                changes.append(change)
                at = change.at if isinstance(change, AuditEntry) else event_time(change)
                if at is not None and (partition not in newest or at > newest[partition]):
                    newest[partition] = at
        return changes, newest

    async def _apply_until_done(
        self,
        consumer: AIOKafkaConsumer,
        conn: psycopg.AsyncConnection | None,
        changes: list[Change | AuditEntry],
        newest: dict[TopicPartition, datetime],
    ) -> psycopg.AsyncConnection:
        entries = [c for c in changes if isinstance(c, AuditEntry)]
        projected = [c for c in changes if not isinstance(c, AuditEntry)]
        scored = sorted(
            {
                c.host_id
                for c in projected
                if isinstance(c, ScanCompleted)
                and c.scanner == ADAPTIVE_SCANNER
                and c.status is ScanStatus.SUCCEEDED
                and c.score is not None
            }
        )
        backoff = 0.5
        failing = False
        while True:
            try:
                if conn is None or conn.closed:
                    conn = await connect(self.settings.database_url, timeout=5)
                progress: dict[TopicPartition, tuple[int, float]] = {}
                summary = await apply(
                    projected,
                    conn,
                    also=partial(self._in_batch, conn, entries, scored, consumer, newest, progress),
                )
                self._progress.committed(progress)
                self.applied += summary.applied
                self.alert_round.count(summary.alerts)
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

    async def _in_batch(
        self,
        conn: psycopg.AsyncConnection,
        entries: list[AuditEntry],
        scored: list[str],
        consumer: AIOKafkaConsumer,
        newest: dict[TopicPartition, datetime],
        written: dict[TopicPartition, tuple[int, float]],
        applied: BatchSummary,
    ) -> None:
        """What the batch's transaction holds besides `apply`'s: audit rows, the score trends
        of the hosts that got results (their results written by now), progress rows."""
        await audit.record(conn, entries)
        applied.alerts.add(await trends.apply_score_trends(conn, scored))
        await self._progress.record(conn, consumer, newest, written)

    @staticmethod
    async def _lag(consumer: AIOKafkaConsumer) -> int:
        """Records not yet read on the assigned partitions, as far as the last fetches tell."""
        lag = 0
        for partition in consumer.assignment():
            highwater = consumer.highwater(partition)
            if highwater is not None:
                lag += max(0, highwater - await consumer.position(partition))
        return lag

    @staticmethod
    async def _commit(consumer: AIOKafkaConsumer) -> None:
        try:
            await consumer.commit()
        except (CommitFailedError, KafkaError) as error:
            # A rebalance took partitions away; their next owner replays, idempotently.
            log.info("projector offset commit skipped: %s", error)


def _decoder(adapter: Any) -> Callable[[Any], Change | None]:
    """Decode a record's value with `adapter`; None for one that does not decode."""

    def decode(record: Any) -> Change | None:
        try:
            return codec.decode(adapter, record.value)  # type: ignore[no-any-return]
        except Undecodable:
            return None

    return decode


def _host_changelog(record: Any) -> Change | None:
    try:
        return codec.host_changelog_change(
            record.key, record.value, record.headers, record.timestamp
        )
    except Undecodable:
        return None


def _only(kind: type[Contract], adapter: Any) -> Callable[[Any], Change | None]:
    """Decode only records of `kind`; the others are passed over without parsing them."""
    decode = _decoder(adapter)
    tag = f'"{kind.model_fields["kind"].default}"'.encode()

    def decode_kind(record: Any) -> Change | None:
        raw = record.value
        if raw is None or tag not in raw:
            return None
        change = decode(record)
        return change if isinstance(change, kind) else None

    return decode_kind
