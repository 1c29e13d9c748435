"""The schedule stage's tables and the writes and sends every part of it goes through.

Schedule side: the schedule states (`schedules`, by schedule id, with their decoded values kept
for reading again) and, in `schedule-fanouts`, each schedule's pending fan-outs (key: the
schedule id) and the command ends it counted (`counted:` + schedule/host). Host side, the ledger
of `streams.policy.schedule_commands` in `schedule-commands`: command id -> entry; `busy:`,
`ended:` and `last:` + host/scanner.
"""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from kairos.floor.clock import Clock
from kairos.floor.settings import Settings
from schemas.base import Contract
from schemas.internal import DispatchRequested, SlotReleased
from schemas.schedules import RunPlan, Schedule, ScheduleState, load_schedule_state
from schemas.topics import TopicNames
from streams import codec, topology
from streams.direct import DirectSends, table_value
from streams.due_index import DueIndex
from streams.guard import Guard
from streams.partition_index import HostsByPartition, partition_of
from streams.policy.fanout import PendingFanOuts
from streams.policy.schedule_commands import CommandEntry


class StageHost(Protocol):
    """What the schedule stage uses of the host stage it runs beside: shared tables, topics and
    the dead-letter guard (`streams.stages.hosts.HostStage` is one; the stage never imports it)."""

    settings: Settings
    clock: Clock
    names: TopicNames
    hosts: Any
    hosts_by_partition: HostsByPartition
    guard: Guard

    async def dispatch(self, message: DispatchRequested | SlotReleased) -> None: ...

    def gathering(self) -> AbstractAsyncContextManager[None]: ...

    async def send_gathered(self) -> None: ...

    def hand_over(self) -> None: ...

    async def signal(
        self, key: bytes | None, value: bytes, partition: int | None = None
    ) -> None: ...

    def wake_host(self, host_id: str) -> None: ...


STATES_KEPT = 2048
"""Decoded schedule states kept for reading again: twice a 1,000-schedule cron minute, so a
minute's runs read their states from memory while the cache stays bounded however many
schedules there are."""


def named_targets(schedule: Schedule, run: RunPlan) -> Iterable[str] | None:
    """The object ids a run is limited to (trigger, retry, static ids); None: every host."""
    if run.object_id is not None:
        return (run.object_id,)
    if run.host_ids is not None:
        return run.host_ids
    return schedule.targets.object_ids


def counted_key(schedule_id: str, host_id: str) -> str:
    """Schedule side: the commands of this schedule on this host whose end was counted."""
    return f"counted:{schedule_id}/{host_id}"


class ScheduleTables:
    """The stage's tables, its due index and counters, and its one way to write and send."""

    def __init__(self, worker: StageHost, app: Any, direct: DirectSends) -> None:
        settings = worker.settings
        self.worker = worker
        self.names = worker.names
        self.partitions = settings.partitions
        self.due_index = DueIndex()
        self.counters: Counter[str] = Counter()
        # Every table write and send of this stage goes straight to the producer, as the host
        # stage's do (see `streams.direct`): Faust's per-record path cost more than the stage.
        self._direct = direct
        self.table = topology.SCHEDULES.declare(app, settings)
        self.fanouts = topology.SCHEDULE_FANOUTS.declare(app, settings)
        self.commands = topology.SCHEDULE_COMMANDS.declare(app, settings)
        self.loaded: OrderedDict[str, tuple[bytes, ScheduleState]] = OrderedDict()
        """The states last read or stored (`STATES_KEPT` at most, least recently used out),
        each with the very bytes the table holds for it; other bytes under the key are read
        afresh. A run's schedule is read again for its decision's store, for every partition's
        fan-out reply and for every command's end, so keeping only the last one decoded
        would decode the same states again and again."""

    def load(self, schedule_id: str) -> ScheduleState | None:
        stored = table_value(self.table, schedule_id)
        if not stored:
            return None
        loaded = self.loaded.get(schedule_id)
        if loaded is not None and loaded[0] is stored:
            self.loaded.move_to_end(schedule_id)
            return loaded[1]
        state = load_schedule_state(json.loads(stored))
        self.keep_loaded(schedule_id, stored, state)
        return state

    def keep_loaded(self, schedule_id: str, stored: bytes, state: ScheduleState) -> None:
        loaded = self.loaded
        loaded[schedule_id] = (stored, state)
        loaded.move_to_end(schedule_id)
        if len(loaded) > STATES_KEPT:
            loaded.popitem(last=False)

    def pending(self, schedule_id: str) -> PendingFanOuts:
        stored = table_value(self.fanouts, schedule_id)
        return PendingFanOuts.model_validate_json(stored) if stored else PendingFanOuts()

    async def keep_pending(self, schedule_id: str, pending: PendingFanOuts) -> None:
        encoded = pending.model_dump_json(exclude_none=True).encode()
        await self.put(self.fanouts, schedule_id, encoded)

    def entry(self, command_id: str) -> CommandEntry | None:
        stored = table_value(self.commands, command_id)
        return CommandEntry.model_validate_json(stored) if stored else None

    def marker(self, key: str) -> str | None:
        """A ledger marker (`busy:`, `ended:`): the command id it names."""
        held = table_value(self.commands, key)
        return held.decode() if held is not None else None

    async def signal(self, schedule_id: str, message: Contract) -> None:
        await self.worker.signal(schedule_id.encode(), codec.encode(message))

    async def send(self, topic: str, schedule_id: str, value: bytes) -> None:
        """A record keyed by schedule id, on the partition the producer's partitioner would pick.

        Like the stage's table writes (`put`), it is `queue`d: inside the host stage's pass it
        goes out with the pass's batches, one per topic partition, rather than an aiokafka
        `send` per record. Only this stage writes these topics and its tables'
        changelogs, always through `queue`, so two records for one schedule keep their order."""
        partition = partition_of(schedule_id, self.partitions)
        await self._direct.queue(topic, schedule_id.encode(), value, partition)

    async def put(self, table: Any, key: str, value: bytes) -> None:
        await self._direct.put_here(table, key, value)

    async def delete(self, table: Any, key: str) -> None:
        if key in table.data:  # As `table.pop(key, None)`: no tombstone for a key never set.
            await self._direct.put_here(table, key, None)
