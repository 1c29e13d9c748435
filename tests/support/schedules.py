"""Generic-schedule helpers for broker tests: scheduler time, what Kairos recorded, outages."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaProducer

from kairos.floor.clock import ScaledClock
from kairos.floor.settings import Settings
from schemas.objects import ObjectEvent
from schemas.schedules import ScheduleRunRecorded, ScheduleState, ScheduleStateChanged
from streams import codec
from tests.support.agents import ScannerFleet
from tests.support.factories import host_created, schedule_upserted
from tests.support.kafka import Collector, configure, publish, start_producer, wait_until
from tests.support.stack import WorkerProcess


def by_schedule(fleet: ScannerFleet, schedule_id: str) -> list[dict[str, Any]]:
    """The scan commands `fleet` has seen for one schedule, in arrival order."""
    return [c for c in fleet.commands if c.get("schedule_id") == schedule_id]


def due_at(command: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(command["due_at"])


# --- scheduler time -----------------------------------------------------------------------


async def sleep_until(clock: ScaledClock, instant: datetime) -> None:
    """Sleep until `clock` (the workers' clock, rebuilt in the test) reads `instant`."""
    ahead = (instant - clock.now()).total_seconds()
    if ahead > 0:
        await asyncio.sleep(clock.wall_seconds(ahead))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def grid_before(instant: datetime, period: timedelta) -> datetime:
    """The last whole multiple of `period` since the epoch at or before `instant`: where
    "*/2 * * * *" and the like fire in UTC."""
    return _EPOCH + ((instant - _EPOCH) // period) * period


def grid_between(after: datetime, until: datetime, period: timedelta) -> list[datetime]:
    """The multiples of `period` in (after, until]."""
    points = []
    point = grid_before(after, period) + period
    while point <= until:
        points.append(point)
        point += period
    return points


# --- what Kairos recorded on kairos-schedules and kairos-schedule-runs ----------------------


class ScheduleLog:
    """Schedule states and run records as a Collector has read them, per schedule."""

    def __init__(self, collector: Collector, settings: Settings) -> None:
        names = settings.topics
        self._collector = collector
        self._adapters = {
            names.schedules: codec.schedule_state_changed,
            names.schedule_runs: codec.schedule_run_recorded,
        }
        self._changes_topic = names.schedule_changes

    def _records(self) -> list[Any]:
        return [
            codec.decode(self._adapters[record.topic], record.value)
            for record in list(self._collector.records)
            if record.topic in self._adapters
        ]

    def runs(self, schedule_id: str) -> list[ScheduleRunRecorded]:
        """Runs recorded as fired or skipped (an ended run is recorded a second time, a
        dropped occurrence once, as "dropped")."""
        return [
            record
            for record in self._records()
            if isinstance(record, ScheduleRunRecorded)
            and record.schedule_id == schedule_id
            and record.outcome in ("fired", "skipped")
        ]

    def outcomes(self, schedule_id: str, *outcomes: str) -> list[ScheduleRunRecorded]:
        """Records of one schedule with one of `outcomes` (ended, dropped...)."""
        return [
            record
            for record in self._records()
            if isinstance(record, ScheduleRunRecorded)
            and record.schedule_id == schedule_id
            and record.outcome in outcomes
        ]

    def failures(self, schedule_id: str) -> list[ScheduleRunRecorded]:
        return [
            record
            for record in self._records()
            if isinstance(record, ScheduleRunRecorded)
            and record.schedule_id == schedule_id
            and record.outcome == "failed"
        ]

    def occurrences(self, schedule_id: str) -> list[datetime]:
        """Occurrences of first attempts that ran, in order and without repeats."""
        found = {run.occurrence for run in self.runs(schedule_id) if run.attempt == 1}
        return sorted(found)

    def states(self, schedule_id: str) -> list[ScheduleStateChanged]:
        return [
            record
            for record in self._records()
            if isinstance(record, ScheduleStateChanged) and record.schedule_id == schedule_id
        ]

    def state(self, schedule_id: str) -> ScheduleState | None:
        """The latest state stored, None before the first one (or after a delete)."""
        states = self.states(schedule_id)
        return states[-1].state if states else None

    def changes(self, schedule_id: str) -> list[Any]:
        """The `schedule.*` events on schedule-changes for one schedule, Kairos' own included."""
        found = []
        for record in list(self._collector.records):
            if record.topic != self._changes_topic or record.key != schedule_id.encode():
                continue
            found.append(codec.decode(codec.schedule_change, record.value))
        return found


@dataclass
class ScheduleHarness:
    """One test's view of Kairos: a producer, a scanner fleet and the schedule topics."""

    settings: Settings
    producer: AIOKafkaProducer
    fleet: ScannerFleet
    log: ScheduleLog

    async def configure(self, **changes: Any) -> None:
        """Change the scheduler config (a scan timeout that suits a fast clock) and wait until
        the workers are told."""
        await configure(self.settings, self.producer, **changes)

    async def add_hosts(self, *host_ids: str, **attributes: Any) -> None:
        for host_id in host_ids:
            await self.send_object(host_created(host_id, **attributes))

    async def send_object(self, event: ObjectEvent) -> None:
        await publish(self.producer, self.settings.topics.object_created, event.object_id, event)

    async def send_change(self, event: Any) -> None:
        """A `schedule.*` event, keyed by its schedule id."""
        topic = self.settings.topics.schedule_changes
        await publish(self.producer, topic, event.schedule_id, event)

    async def upsert(self, schedule_id: str, **fields: Any) -> None:
        await self.send_change(schedule_upserted(schedule_id, **fields))

    async def wait_for_schedules(self, *schedule_ids: str, timeout: float = 30) -> None:
        await wait_until(
            lambda: all(self.log.state(schedule_id) for schedule_id in schedule_ids),
            timeout=timeout,
            what=f"the states of {', '.join(schedule_ids)}",
        )

    def commands(self, schedule_id: str, *, attempt: int | None = 1) -> list[dict[str, Any]]:
        """Commands of one schedule (first attempts unless told), in arrival order."""
        return [
            command
            for command in by_schedule(self.fleet, schedule_id)
            if attempt is None or command["attempt"] == attempt
        ]


@asynccontextmanager
async def schedule_harness(
    settings: Settings, **fleet_options: Any
) -> AsyncIterator[ScheduleHarness]:
    names = settings.topics
    producer = await start_producer(settings)
    try:
        async with (
            Collector(
                settings, names.schedules, names.schedule_runs, names.schedule_changes
            ) as collector,
            ScannerFleet(settings, **fleet_options) as fleet,
        ):
            log = ScheduleLog(collector, settings)
            yield ScheduleHarness(settings, producer, fleet, log)
    finally:
        await producer.stop()


# --- outages ------------------------------------------------------------------------------


@contextmanager
def suspended(worker: WorkerProcess) -> Iterator[None]:
    """The worker process is frozen (SIGSTOP) inside the block: an outage that keeps its
    consumer-group membership as long as it stays shorter than the session timeout."""
    os.killpg(worker.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(worker.process.pid, signal.SIGCONT)
