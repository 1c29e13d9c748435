"""The schedule side of a run: the decisions of `streams.policy.schedules` settled (their runs
started, their events sent, their state stored), fan-out replies collected until a run is
`run_dispatched`, and command ends counted once for `run_finished`."""

from __future__ import annotations

import json
from datetime import datetime

from schemas.internal import ScheduleCommandEnded, ScheduleFanOutDone
from schemas.schedules import RunPlan, ScheduleState
from streams import codec
from streams.direct import table_value
from streams.policy.fanout import answered, fanned_out, held
from streams.policy.schedule_commands import counted_once
from streams.policy.schedule_ledger import concluded_besides
from streams.policy.schedules import ScheduleDecision, run_dispatched, run_finished
from streams.stages.schedules.fan_out import FanOuts
from streams.stages.schedules.records import RunRecords
from streams.stages.schedules.tables import ScheduleTables, counted_key


class Runs:
    def __init__(self, tables: ScheduleTables, fan_outs: FanOuts, records: RunRecords) -> None:
        self.tables = tables
        self.fan_outs = fan_outs
        self.records = records

    async def settle(
        self,
        schedule_id: str,
        before: ScheduleState | None,
        decision: ScheduleDecision,
        now: datetime,
    ) -> None:
        """Start the decision's runs, then store and publish the state it leaves."""
        tables = self.tables
        if decision.ignored:
            tables.counters[f"ignored_{decision.ignored}"] += 1
        state = decision.state
        changed = decision.changed
        for run in decision.runs:
            assert state is not None
            state, started_changed = await self._start(state, run, now)
            changed = changed or started_changed
        for event in decision.events:
            await tables.send(tables.names.schedule_changes, schedule_id, codec.encode(event))
        incarnation = state.incarnation if state else None
        await self.records.dropped(schedule_id, incarnation, decision.dropped, now)
        await self.records.concluded(schedule_id, incarnation, decision.concluded)
        if changed:
            await self.records.store(schedule_id, before, state, now)

    async def _start(
        self, state: ScheduleState, run: RunPlan, now: datetime
    ) -> tuple[ScheduleState, bool]:
        """Fan the run out to the partitions that may hold its targets."""
        schedule = state.schedule
        partitions = self.fan_outs.partitions(schedule, run)
        if not partitions:
            return await self._dispatched(state, run, 0, 0, now, {})
        if run.tracked:
            pending = fanned_out(self.tables.pending(schedule.id), run, len(partitions))
            await self.tables.keep_pending(schedule.id, pending)
        await self.fan_outs.send(schedule, run, partitions)
        return state, False

    async def _dispatched(
        self,
        state: ScheduleState,
        run: RunPlan,
        issued: int,
        skipped: int,
        now: datetime,
        skipped_hosts: dict[str, int],
    ) -> tuple[ScheduleState, bool]:
        await self.records.fired(run, issued, skipped, now, skipped_hosts)
        decision = run_dispatched(state, run, issued, now=now)
        after = decision.state
        assert after is not None
        changed = decision.changed
        schedule_id = state.schedule.id
        await self.records.dropped(schedule_id, after.incarnation, decision.dropped, now)
        ended = concluded_besides(decision.concluded, run)
        await self.records.concluded(schedule_id, after.incarnation, ended)
        for released in decision.runs:
            after, started_changed = await self._start(after, released, now)
            changed = changed or started_changed
        return after, changed

    async def collect(
        self, state: ScheduleState | None, done: ScheduleFanOutDone, now: datetime
    ) -> None:
        """A partition's fan-out reply: once every reply of a tracked run is in, it is
        dispatched, and the ends that overtook the replies are counted."""
        tables = self.tables
        run = done.run
        if not run.tracked:
            await self.records.fired(run, done.issued, done.skipped, now, done.skipped_hosts)
            return
        if state is None:
            return
        result = answered(tables.pending(state.schedule.id), done)
        if result.duplicate:
            tables.counters["duplicate_fanout_reply"] += 1
            return
        await tables.keep_pending(state.schedule.id, result.pending)
        tally = result.dispatched
        if tally is None:
            return
        after, changed = await self._dispatched(
            state, run, tally.issued, tally.skipped, now, tally.skipped_hosts
        )
        if changed:
            await self.records.store(state.schedule.id, state, after, now)
        for ended in result.ends:
            await self.command_ended(tables.load(state.schedule.id), ended, now)

    async def command_ended(
        self, state: ScheduleState | None, ended: ScheduleCommandEnded, now: datetime
    ) -> None:
        tables = self.tables
        if state is None:
            return
        counted = counted_key(state.schedule.id, ended.host_id)
        stored = table_value(tables.fanouts, counted)
        recent: list[str] = json.loads(stored) if stored else []
        fresh, remembered = counted_once(recent, ended.command_id)
        if not fresh:
            # A replayed end report (killed after the report, before the offset commit).
            tables.counters["duplicate_schedule_end_report"] += 1
            return
        decision = run_finished(
            state,
            ended.occurrence,
            ended.attempt,
            outcome=ended.outcome,
            host_id=ended.host_id,
            error=ended.error,
            now=now,
        )
        if decision.ignored == "not_dispatched":
            # The result overtook the run's last fan-out reply: keep it until that comes.
            pending = held(tables.pending(state.schedule.id), ended)
            await tables.keep_pending(state.schedule.id, pending)
            return
        if decision.ignored is None:
            await tables.put(tables.fanouts, counted, codec.dumps(list(remembered)))
        await self.settle(state.schedule.id, state, decision, now)
