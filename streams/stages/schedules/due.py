"""The schedule side's inputs keyed by schedule id, and its timer: the due index of the
schedules this worker owns, ticked into `SchedulesDue` signals and rebuilt on recovery."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from schemas.internal import (
    ScheduleCommandEnded,
    ScheduleDue,
    ScheduleFanOutDone,
    ScheduleObjectEvent,
    SchedulesDue,
)
from schemas.schedules import load_schedule_state
from streams import codec
from streams.direct import table_value
from streams.partition_index import by_partition
from streams.policy.schedules import decide_schedule, due_runs, wake_at
from streams.stages.schedules.fan_out import FanOuts
from streams.stages.schedules.runs import Runs
from streams.stages.schedules.tables import ScheduleTables

log = logging.getLogger("streams.stages.schedules")

SCHEDULES_PER_DUE_SIGNAL = 1000
"""Keeps a SchedulesDue signal far below Kafka's 1 MiB message limit (ids: 128 chars at most)."""
RUN_TIMEOUT = timedelta(hours=24)
"""A tracked run still waiting for results after this is concluded as failed (lost replies)."""


class Due:
    def __init__(self, tables: ScheduleTables, fan_outs: FanOuts, runs: Runs) -> None:
        self.tables = tables
        self.fan_outs = fan_outs
        self.runs = runs

    async def tick(self, now: datetime) -> None:
        """One `SchedulesDue` per partition for the schedules due by `now`."""
        tables = self.tables
        due = (schedule_id for schedule_id, _ in tables.due_index.pop_due(now))
        for partition, schedule_ids in by_partition(
            due, tables.partitions, SCHEDULES_PER_DUE_SIGNAL
        ):
            signal = SchedulesDue(schedule_ids=schedule_ids, wake_at=now)
            await tables.worker.signal(None, codec.encode(signal), partition)

    async def wake(
        self, due: SchedulesDue, topic: str, partition: int, offset: int, now: datetime
    ) -> None:
        """Each schedule as if it had its own `ScheduleDue`; one's failure parks only that one.

        The runs they start are fanned out at the end, one record per destination partition
        (handled here for this worker's own partitions), and their claims go out at once."""
        worker = self.tables.worker
        async with self.fan_outs.gathering():
            for schedule_id in due.schedule_ids:
                signal = ScheduleDue(schedule_id=schedule_id, wake_at=due.wake_at)
                raw = partial(codec.encode, signal)
                origin = (topic, partition, offset, schedule_id.encode(), raw)
                await worker.guard.handled(origin, self.handle(schedule_id, signal, now, origin))
        # The signals of one tick are fetched together: the next passes must not hold these
        # claims back. They go out now, and the consumer lets the dispatcher have its records
        # before the next pass (a slice would otherwise run several passes).
        await worker.send_gathered()
        worker.hand_over()

    async def handle(
        self, schedule_id: str, parsed: Any, now: datetime, origin: tuple[Any, ...]
    ) -> None:
        """An input keyed by its schedule id; the due index then follows the stored state."""
        tables = self.tables
        await self._handle_keyed(schedule_id, parsed, now, origin)
        # Whatever happened, the due index follows the stored state (a tick popped it).
        after = tables.load(schedule_id)
        tables.due_index.set(schedule_id, wake_at(after) if after else None)
        if isinstance(parsed, ScheduleDue) and after is not None:
            again = wake_at(after)
            if again is not None and again <= now:  # A backlog: the next batch.
                await tables.signal(schedule_id, ScheduleDue(schedule_id=schedule_id, wake_at=now))

    async def _handle_keyed(
        self, schedule_id: str, parsed: Any, now: datetime, origin: tuple[Any, ...]
    ) -> None:
        state = self.tables.load(schedule_id)
        match parsed:
            case ScheduleDue():
                if state is None:
                    return
                decision = due_runs(state, now=now, run_timeout=RUN_TIMEOUT)
            case ScheduleFanOutDone():
                await self.runs.collect(state, parsed, now)
                return
            case ScheduleCommandEnded():
                await self.runs.command_ended(state, parsed, now)
                return
            case ScheduleObjectEvent():
                decision = decide_schedule(state, parsed.event, now=now)
            case _:
                decision = decide_schedule(state, parsed, now=now)
        if decision.rejection is not None:
            await self.tables.worker.guard.dead_letter(*origin, decision.rejection)
            return
        await self.runs.settle(schedule_id, state, decision, now)

    def rebuild_index(self) -> Awaitable[None]:
        """On the schedule table's recovery: the due index of its states, and the fan-outs a
        crash left unanswered sent again."""
        tables = self.tables

        async def rebuild() -> None:
            guard = tables.worker.guard
            tables.due_index.clear()
            fanned_out_again = 0
            for schedule_id, stored in list(tables.table.items()):
                try:
                    state = load_schedule_state(json.loads(stored))
                except Exception as error:  # Faust would swallow it and stop the rebuild.
                    await guard.unreadable_state(tables.table, schedule_id, stored, error)
                    continue
                tables.due_index.set(schedule_id, wake_at(state))
                try:
                    pending = tables.pending(schedule_id)
                except ValueError as error:  # Unreadable: its runs wait for the run timeout.
                    stored_pending = table_value(tables.fanouts, schedule_id)
                    await guard.unreadable_state(tables.fanouts, schedule_id, stored_pending, error)
                    continue
                fanned_out_again += await self.fan_outs.again(state.schedule, pending)
            log.info(
                "schedule due index rebuilt: %d schedules, %d fan-outs sent again",
                len(tables.due_index),
                fanned_out_again,
            )

        return rebuild()
