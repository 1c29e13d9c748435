"""The projector's progress rows: per partition it reads, the backlog and the lag behind the
newest change applied, in `projection_progress`."""

from __future__ import annotations

from datetime import datetime

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition

from kairos.floor.clock import Clock


class ProgressRecorder:
    """What this projector last recorded of each of its partitions."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._written: dict[TopicPartition, tuple[int, float]] = {}
        """Per partition, the backlog and lag in seconds this projector last recorded."""
        self._assignment: set[TopicPartition] = set()

    def committed(self, written: dict[TopicPartition, tuple[int, float]]) -> None:
        """The rows a batch wrote, once its transaction committed."""
        self._written.update(written)

    async def record(
        self,
        conn: psycopg.AsyncConnection,
        consumer: AIOKafkaConsumer,
        newest: dict[TopicPartition, datetime],
        written: dict[TopicPartition, tuple[int, float]],
    ) -> None:
        """The projection_progress rows of this projector's partitions, in the batch's
        transaction; what was written goes into `written`.

        One row per partition, so that projectors sharing the group (several workers that
        each project) do not overwrite one another's figures. A partition the batch did not
        read is written only when its backlog changed: caught up, its lag is 0; behind, it
        keeps the lag its last change gave it.
        """
        assignment = consumer.assignment()
        if assignment != self._assignment:
            # Partitions that were away may have been written by their other owner meanwhile.
            self._written.clear()
            self._assignment = set(assignment)
        now = self.clock.now()
        sources: list[str] = []
        newest_at: list[datetime | None] = []
        lags: list[int] = []
        lags_seconds: list[float] = []
        for partition in sorted(assignment):
            highwater = consumer.highwater(partition)
            if highwater is None:
                continue  # Not fetched yet: its backlog is not known.
            lag = max(0, highwater - await consumer.position(partition))
            at = newest.get(partition)
            before = self._written.get(partition)
            if at is not None:
                lag_seconds = max(0.0, (now - at).total_seconds())
            elif before is not None and before[0] == lag:
                continue
            else:
                lag_seconds = before[1] if before is not None and lag else 0.0
            sources.append(f"{partition.topic}:{partition.partition}")
            newest_at.append(at)
            lags.append(lag)
            lags_seconds.append(lag_seconds)
            written[partition] = (lag, lag_seconds)
        if not sources:
            return
        await conn.execute(
            "INSERT INTO projection_progress"
            " (source, newest_event_at, applied_at, consumer_lag, lag_seconds)"
            " SELECT source, newest_event_at, %s, consumer_lag, lag_seconds FROM unnest("
            "%s::text[], %s::timestamptz[], %s::int8[], %s::float8[])"
            " AS p(source, newest_event_at, consumer_lag, lag_seconds)"
            " ON CONFLICT (source) DO UPDATE SET"
            " newest_event_at = GREATEST(projection_progress.newest_event_at,"
            " excluded.newest_event_at),"
            # A partition the batch did not read keeps the time of its last applied change.
            " applied_at = CASE WHEN excluded.newest_event_at IS NULL"
            " THEN projection_progress.applied_at ELSE excluded.applied_at END,"
            " consumer_lag = excluded.consumer_lag, lag_seconds = excluded.lag_seconds",
            (now, sources, newest_at, lags, lags_seconds),
        )
