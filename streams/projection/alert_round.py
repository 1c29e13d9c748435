"""The projector's alert round: the time-based alert checks when due, then every alert change
the read model holds unpublished sent to the alerts topic."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from kairos.floor.clock import Clock
from kairos.floor.db import DatabaseUnavailable, connect
from kairos.floor.settings import Settings
from streams.projection import alerts, trends

log = logging.getLogger("streams.projection.runner")  # The projector's lines, under one name.

ALERTS_PER_SEND = 500
ALERTS_ACK_SECONDS = 30.0
ALERTS_RETRY_SECONDS = (1.0, 60.0)
"""After a failed alert round, wait this long before the next (doubling up to the second)."""
CAUGHT_UP_RECORDS = 1000
"""Time-based alerts wait while more records than this are unread: a read model still
catching up (a restart, a rebuild) holds old scan times and would raise false alarms."""


class AlertRound:
    """Counts the alerts raised, resolved and published, and keeps the round's retry pace."""

    def __init__(self, settings: Settings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        self.raised = 0
        self.resolved = 0
        self.published = 0
        self._pending = True  # Rows left unpublished by a previous run are sent first.
        self._failing = False
        self._retry_at = 0.0
        self._backoff = ALERTS_RETRY_SECONDS[0]
        self._checked_at = 0.0

    def count(self, counts: alerts.AlertCounts) -> None:
        """Alerts raised or resolved by a batch or a check: they are published next round."""
        self.raised += counts.raised
        self.resolved += counts.resolved
        if counts.raised or counts.resolved:
            self._pending = True

    async def run(
        self, conn: psycopg.AsyncConnection | None, producer: AIOKafkaProducer, lag: int
    ) -> psycopg.AsyncConnection | None:
        """Check the time-based alerts when due, then publish what is unpublished.

        A failure is reported once and retried on a later round; alerts wait in the read
        model meanwhile, and projection goes on.
        """
        due = (
            time.monotonic() - self._checked_at >= self.settings.alert_check_seconds
            and lag <= CAUGHT_UP_RECORDS
        )
        if not (due or self._pending) or time.monotonic() < self._retry_at:
            return conn
        try:
            if conn is None or conn.closed:
                conn = await connect(self.settings.database_url, timeout=5)
            if due:
                self._checked_at = time.monotonic()
                counts = await alerts.check_time_conditions(
                    conn, self.clock.now(), more=(trends.check_organization_trends,)
                )
                self.count(counts)
                self._pending = True
            while self._pending:
                waiting = await alerts.unpublished(conn, ALERTS_PER_SEND)
                if waiting:
                    await self._send(producer, waiting)
                    await alerts.mark_published(conn, waiting)
                    self.published += len(waiting)
                self._pending = len(waiting) == ALERTS_PER_SEND
            if self._failing:
                log.warning("alerts are checked and published again")
                self._failing = False
                self._backoff = ALERTS_RETRY_SECONDS[0]
        except (DatabaseUnavailable, psycopg.OperationalError, KafkaError, TimeoutError) as error:
            if not self._failing:
                log.warning(
                    "alerts not published yet (%s); retrying",
                    str(error).splitlines()[0] if str(error) else type(error).__name__,
                )
                self._failing = True
            self._pending = True
            # Projection goes on meanwhile; a database or broker that is away is not asked
            # again on every poll.
            self._retry_at = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, ALERTS_RETRY_SECONDS[1])
            if conn is not None and conn.closed:
                conn = None
        return conn

    async def _send(self, producer: AIOKafkaProducer, waiting: list[Any]) -> None:
        topic = self.settings.topics.alerts
        sent = [
            await producer.send(
                topic, alert.model_dump_json().encode(), key=alert.subject_id.encode()
            )
            for alert in waiting
        ]
        # Wait without cancelling: the producer still owns the delivery futures.
        done, pending = await asyncio.wait(sent, timeout=ALERTS_ACK_SECONDS)
        if pending:
            raise TimeoutError(f"{len(pending)} alert changes not acknowledged")
        for future in done:
            error = future.exception()
            if error is not None:
                raise error
