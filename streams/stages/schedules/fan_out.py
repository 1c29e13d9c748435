"""The schedule side of a fan-out: a run's `ScheduleFanOut` to every partition that may hold
its targets, gathered into one record per partition while a pass over many schedules runs,
and sent again on recovery to the partitions that have not answered."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import Any

from schemas.internal import ScheduleFanOut
from schemas.schedules import RunPlan, Schedule
from streams import codec
from streams.direct import PARTITION_IN_HAND
from streams.partition_index import partition_of
from streams.policy.fanout import PendingFanOuts, unanswered
from streams.stages.schedules.tables import ScheduleTables, named_targets

FAN_OUTS_MAX_BYTES = 500_000
"""A ScheduleFanOuts record stays at half of Kafka's 1 MiB message limit."""

HandleFanOut = Callable[[ScheduleFanOut, int, datetime], Awaitable[None]]
"""The host side's handling of one fan-out on a partition (`Ledger.fan_out_here`)."""


class FanOuts:
    def __init__(self, tables: ScheduleTables, assignor: Any, handle_here: HandleFanOut) -> None:
        self.tables = tables
        self._assignor = assignor
        self._handle_here = handle_here
        self._gathered: defaultdict[int, list[ScheduleFanOut]] | None = None
        """While a pass over many schedules runs: its fan-outs by destination partition."""

    def partitions(self, schedule: Schedule, run: RunPlan) -> list[int]:
        """The partitions that may hold the run's targets: those of its named ids, else all."""
        partitions = self.tables.partitions
        wanted = named_targets(schedule, run)
        if wanted is None:
            return list(range(partitions))
        return sorted({partition_of(object_id, partitions) for object_id in wanted})

    async def send(self, schedule: Schedule, run: RunPlan, partitions: list[int]) -> None:
        """The run's fan-out to `partitions`, now or when the gathering pass ends."""
        fan_out = ScheduleFanOut(schedule=schedule, run=run, expected=len(partitions))
        if self._gathered is not None:
            for partition in partitions:
                self._gathered[partition].append(fan_out)
            return
        encoded = codec.encode(fan_out)
        for partition in partitions:
            await self.tables.worker.signal(schedule.id.encode(), encoded, partition)

    async def again(self, schedule: Schedule, pending: PendingFanOuts) -> int:
        """Recovery: the fan-outs of the runs some partition has not answered, sent again to
        those partitions (see `unanswered`). Returns how many were sent."""
        sent = 0
        for tally in unanswered(pending):
            fan_out = ScheduleFanOut(schedule=schedule, run=tally.run, expected=tally.expected)
            encoded = codec.encode(fan_out)
            for partition in self.partitions(schedule, tally.run):
                if partition not in tally.parts:
                    await self.tables.worker.signal(schedule.id.encode(), encoded, partition)
                    sent += 1
        return sent

    @contextlib.asynccontextmanager
    async def gathering(self) -> AsyncIterator[None]:
        """Fan-outs made inside go out when it ends (also by an error), one record per
        destination partition: a stream pass there costs more than the fan-out it carries.

        Those of this worker's own partitions that name their targets are handled at once
        instead. As records they would wait behind every other due signal of the tick, fetched
        together (a cron minute's first command came only after all its due passes); their
        recovery is the records' own: a fan-out a crash cut short is sent again
        (`again`). A fan-out over every host stays a record: handled here it would
        hold the loop for all the worker's partitions at once."""
        if self._gathered is not None:
            yield
            return
        gathered: defaultdict[int, list[ScheduleFanOut]] = defaultdict(list)
        self._gathered = gathered
        try:
            yield
        finally:
            self._gathered = None
            topic = self.tables.names.host_signals
            owned = {tp.partition for tp in self._assignor.assigned_actives() if tp.topic == topic}
            encodings: dict[int, bytes] = {}  # A run over every host goes to every partition.

            def encoded_once(fan_out: ScheduleFanOut) -> bytes:
                encoded = encodings.get(id(fan_out))
                if encoded is None:
                    encoded = encodings[id(fan_out)] = codec.encode(fan_out)
                return encoded

            for partition, fan_outs in gathered.items():
                in_hand: list[ScheduleFanOut] = []
                records: list[ScheduleFanOut] = []
                for fan_out in fan_outs:
                    named = named_targets(fan_out.schedule, fan_out.run) is not None
                    (in_hand if named and partition in owned else records).append(fan_out)
                if in_hand:
                    await self._in_hand(in_hand, partition)
                if records:
                    await self._send_records(partition, [encoded_once(f) for f in records])

    async def _in_hand(self, fan_outs: list[ScheduleFanOut], partition: int) -> None:
        """Each fan-out handled as if its record had come on `partition`, under its own guard."""
        worker = self.tables.worker
        now = worker.clock.now()
        in_hand = PARTITION_IN_HAND.set(partition)  # The host-side tables' writes go there.
        try:
            async with worker.gathering():
                for fan_out in fan_outs:
                    key, raw = fan_out.schedule.id.encode(), partial(codec.encode, fan_out)
                    origin = (self.tables.names.host_signals, partition, None, key, raw)
                    await worker.guard.handled(origin, self._handle_here(fan_out, partition, now))
        finally:
            PARTITION_IN_HAND.reset(in_hand)

    async def _send_records(self, partition: int, encoded: list[bytes]) -> None:
        """In records that stay well below Kafka's message limit (a schedule's args alone may
        be 16 KiB)."""
        for chunk in codec.size_bounded(encoded, FAN_OUTS_MAX_BYTES):
            value = chunk[0] if len(chunk) == 1 else codec.schedule_fan_outs(chunk)
            await self.tables.worker.signal(None, value, partition)
