"""What the schedule side writes of its decisions: the stored state and its change record, and
one `ScheduleRunRecorded` per run fired, skipped, dropped or concluded."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from schemas.schedules import RunPlan, ScheduleRunRecorded, ScheduleState
from streams import codec
from streams.policy.schedule_ledger import skip_reason
from streams.policy.schedules import ConcludedRun, DroppedOccurrence, wake_at
from streams.stages.schedules.tables import ScheduleTables, counted_key

DROPPED_RECORDS_PER_DECISION = 100
"""Run records for dropped occurrences per decision; the state's counters count them all."""


class RunRecords:
    def __init__(self, tables: ScheduleTables) -> None:
        self.tables = tables

    async def store(
        self,
        schedule_id: str,
        before: ScheduleState | None,
        state: ScheduleState | None,
        now: datetime,
    ) -> None:
        """Store the state (None: delete it and its fan-out records) and publish the change."""
        tables = self.tables
        encoded = None
        if state is None:
            tables.loaded.pop(schedule_id, None)
            await tables.delete(tables.table, schedule_id)
            await tables.delete(tables.fanouts, schedule_id)
            counted = counted_key(schedule_id, "")
            for key in [k for k in list(tables.fanouts.keys()) if k.startswith(counted)]:
                await tables.delete(tables.fanouts, key)
        else:
            encoded = state.model_dump_json(exclude_none=True).encode()
            await tables.put(tables.table, schedule_id, encoded)
            tables.keep_loaded(schedule_id, encoded, state)
        version = state.version if state else (before.version + 1 if before else 0)
        change = codec.schedule_state_changed_record(schedule_id, version, encoded, now)
        await tables.send(tables.names.schedules, schedule_id, change)
        tables.due_index.set(schedule_id, wake_at(state) if state else None)

    async def fired(
        self, run: RunPlan, issued: int, skipped: int, now: datetime, skipped_hosts: dict[str, int]
    ) -> None:
        record = ScheduleRunRecorded(
            schedule_id=run.schedule_id,
            occurrence=run.occurrence,
            attempt=run.attempt,
            reason=run.reason.value,
            outcome="fired" if issued else "skipped",
            fired_at=now,
            hosts_matched=issued + skipped,
            commands_issued=issued,
            incarnation=run.incarnation,
            skip_reason=None if issued else skip_reason(skipped_hosts),
            skipped_hosts=skipped_hosts,
        )
        await self._send(run.schedule_id, record)

    async def dropped(
        self,
        schedule_id: str,
        incarnation: str | None,
        dropped: Iterable[DroppedOccurrence],
        now: datetime,
    ) -> None:
        for number, occurrence in enumerate(dropped):
            if number >= DROPPED_RECORDS_PER_DECISION:
                self.tables.counters["dropped_records_not_written"] += 1
                continue
            record = ScheduleRunRecorded(
                schedule_id=schedule_id,
                occurrence=occurrence.occurrence,
                attempt=1,
                reason="schedule",
                outcome="dropped",
                fired_at=now,
                skip_reason=occurrence.reason,
                incarnation=incarnation,
            )
            await self._send(schedule_id, record)

    async def concluded(
        self, schedule_id: str, incarnation: str | None, concluded: Iterable[ConcludedRun]
    ) -> None:
        for run in concluded:
            record = ScheduleRunRecorded(
                schedule_id=schedule_id,
                occurrence=run.occurrence,
                attempt=run.attempt,
                reason="schedule",
                outcome=run.outcome.value,
                fired_at=run.started_at,
                hosts_matched=run.commands,
                commands_issued=run.commands,
                commands_succeeded=run.commands - run.failed,
                commands_failed=run.failed,
                error=run.error,
                incarnation=incarnation,
            )
            await self._send(schedule_id, record)

    async def _send(self, schedule_id: str, record: ScheduleRunRecorded) -> None:
        tables = self.tables
        await tables.send(tables.names.schedule_runs, schedule_id, codec.encode(record))
