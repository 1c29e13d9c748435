"""`ScheduleStage`: the schedule stage's parts wired together, and its inputs routed to them."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from schemas.internal import CommandTimedOut, ScheduleFanOut, ScheduleFanOuts, SchedulesDue
from schemas.objects import ObjectEvent
from schemas.results import ScanCompleted
from streams import codec
from streams.codec import Undecodable
from streams.direct import DirectSends
from streams.stages.schedules.due import Due
from streams.stages.schedules.fan_out import FanOuts
from streams.stages.schedules.ledger import Ledger
from streams.stages.schedules.records import RunRecords
from streams.stages.schedules.runs import Runs
from streams.stages.schedules.tables import ScheduleTables, StageHost
from streams.stages.schedules.triggers import TriggerFollower


def is_schedule_message(raw: bytes | None) -> bool:
    """Whether a schedule-changes or host-signals record belongs to this stage."""
    try:
        parsed = json.loads(raw or b"null")
    except ValueError:
        return False
    if not isinstance(parsed, dict):
        return False
    tag = parsed.get("type") or parsed.get("kind")
    return isinstance(tag, str) and tag.startswith("schedule.")


class ScheduleStage:
    """Tables and in-memory indexes of the schedule stage, beside the host stage in one worker."""

    def __init__(self, worker: StageHost, app: Any, direct: DirectSends) -> None:
        self.worker = worker
        self.tables = tables = ScheduleTables(worker, app, direct)
        self.due_index = tables.due_index
        self.counters = tables.counters
        self.ledger = Ledger(tables)
        self.fan_outs = FanOuts(tables, app.assignor, self.ledger.fan_out_here)
        self.runs = Runs(tables, self.fan_outs, RunRecords(tables))
        self.due = Due(tables, self.fan_outs, self.runs)
        self.trigger_follower = TriggerFollower(tables)
        self.triggers = self.trigger_follower.triggers
        tables.table.on_recover(self.due.rebuild_index)
        app.task(self.trigger_follower.follow)

    async def handle(
        self, topic: str, partition: int, offset: int, key: bytes | None, raw: bytes | None
    ) -> None:
        """A schedule-changes or host-signals record of this stage (`is_schedule_message`)."""
        worker = self.worker
        adapter = (
            codec.schedule_change
            if topic == worker.names.schedule_changes
            else codec.schedule_signal
        )
        try:
            parsed = codec.decode(adapter, raw)
        except Undecodable as error:
            await worker.guard.dead_letter(topic, partition, offset, key, raw, str(error))
            return
        now = worker.clock.now()
        if isinstance(parsed, ScheduleFanOut):
            await self.ledger.fan_out_here(parsed, partition, now)
            return
        if isinstance(parsed, ScheduleFanOuts):
            await self.ledger.fan_outs_here(parsed, topic, partition, offset, now)
            return
        if isinstance(parsed, SchedulesDue):
            await self.due.wake(parsed, topic, partition, offset, now)
            return
        schedule_id: str = parsed.schedule_id
        if key is None or key.decode("utf-8", "replace") != schedule_id:
            reason = f"key {key!r} must equal the schedule id {schedule_id!r}"
            await worker.guard.dead_letter(topic, partition, offset, key, raw, reason)
            return
        await self.due.handle(schedule_id, parsed, now, (topic, partition, offset, key, raw))

    async def route_object_event(self, event: ObjectEvent) -> None:
        """Hand an object event to every trigger schedule it matches (keyed by schedule id)."""
        await self.trigger_follower.route(event)

    async def scan_completed(self, result: ScanCompleted, origin: str) -> bool:
        """Release a schedule command's slot and report it; False: not a schedule command."""
        return await self.ledger.scan_completed(result, origin)

    async def command_timed_out(self, signal: CommandTimedOut, origin: str) -> bool:
        """Report a schedule command's missed deadline; False: not a schedule command."""
        return await self.ledger.command_timed_out(signal, origin)

    def holds_scanner(self, host_id: str, scanner: str) -> bool:
        """A schedule's command of `scanner` is in flight on the host (a live busy marker)."""
        return self.ledger.holds_scanner(host_id, scanner)

    async def tick(self, now: datetime) -> None:
        """One `SchedulesDue` per partition for the schedules due by `now`."""
        await self.due.tick(now)
