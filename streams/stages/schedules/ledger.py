"""The host side of the schedule stage: a fan-out's claims on this partition's hosts, and the
end of each schedule command, kept in the ledger by the rules of
`streams.policy.schedule_ledger`."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from functools import partial

from schemas.internal import (
    CommandTimedOut,
    ReleaseOutcome,
    ScheduleFanOut,
    ScheduleFanOutDone,
    ScheduleFanOuts,
)
from schemas.results import ScanCompleted, ScanStatus
from schemas.schedules import RunPlan, Schedule
from schemas.state import HostSchedule
from streams import codec
from streams.direct import table_value
from streams.partition_index import partition_of
from streams.policy import schedule_ledger
from streams.policy.schedule_commands import (
    CommandEntry,
    EndChoice,
    busy_key,
    end_choice,
    last_ended_key,
    last_scan,
    last_scan_key,
)
from streams.policy.targets import dispatch_requests, select_targets
from streams.stages.schedules.tables import ScheduleTables, named_targets


class Ledger:
    def __init__(self, tables: ScheduleTables) -> None:
        self.tables = tables

    async def fan_outs_here(
        self, batch: ScheduleFanOuts, topic: str, partition: int, offset: int, now: datetime
    ) -> None:
        """Each fan-out as if it came alone, under its own guard; one record of claims."""
        worker = self.tables.worker
        async with worker.gathering():
            for fan_out in batch.fan_outs:
                key = fan_out.schedule.id.encode()
                origin = (topic, partition, offset, key, partial(codec.encode, fan_out))
                await worker.guard.handled(origin, self.fan_out_here(fan_out, partition, now))

    async def fan_out_here(self, fan_out: ScheduleFanOut, partition: int, now: datetime) -> None:
        """Select the run's targets among this partition's hosts, claim each, and reply."""
        tables = self.tables
        partitions = tables.partitions
        schedule, run = fan_out.schedule, fan_out.run
        hosts = self._hosts_for(schedule, run, partition)
        scanner = schedule.scanner
        recorded = {
            host.host_id: last_scan(
                table_value(tables.commands, last_scan_key(host.host_id, scanner))
            )
            for host in hosts
        }
        last_scans = schedule_ledger.last_scans(scanner, hosts, recorded)
        selection = select_targets(schedule, run, hosts, now=now, last_scan_by_scanner=last_scans)
        mine = [h for h in selection.host_ids if partition_of(h, partitions) == partition]
        states = {host.host_id: host.state for host in hosts}
        adaptive_busy = schedule_ledger.adaptive_busy(scanner, hosts)
        skipped_hosts = Counter(
            reason.value for host_id, reason in selection.skipped.items()
            if partition_of(host_id, partitions) == partition
        )  # fmt: skip
        issued = 0
        # The claims of this partition's hosts go to the dispatcher as one record.
        async with tables.worker.gathering():
            for request in dispatch_requests(schedule, run, mine, states=states):
                busy = busy_key(request.host_id, scanner)
                busy_with = tables.marker(busy)
                claim = schedule_ledger.claim(
                    schedule.id,
                    run,
                    request.host_id,
                    scanner,
                    entry=tables.entry(request.command_id),
                    busy_with=busy_with,
                    busy_entry=tables.entry(busy_with) if busy_with is not None else None,
                    adaptive_busy=request.host_id in adaptive_busy,
                )
                if not claim.issued:
                    skipped_hosts["busy"] += 1
                    tables.counters["skipped_busy"] += 1
                    continue
                issued += 1
                if not claim.requested:
                    continue
                if claim.record is not None:
                    encoded = claim.record.model_dump_json().encode()
                    await tables.put(tables.commands, request.command_id, encoded)
                await tables.put(tables.commands, busy, request.command_id.encode())
                await tables.worker.dispatch(request)
        done = ScheduleFanOutDone(
            schedule_id=schedule.id,
            run=run,
            partition=partition,
            issued=issued,
            skipped=len(mine) - issued,
            skipped_hosts=dict(skipped_hosts),
        )
        await tables.signal(schedule.id, done)

    def _hosts_for(self, schedule: Schedule, run: RunPlan, partition: int) -> list[HostSchedule]:
        """The hosts of `partition` the run may target: named ones looked up, else all."""
        worker, partitions = self.tables.worker, self.tables.partitions
        named = named_targets(schedule, run)
        candidates = (
            (host_id for host_id in named if partition_of(host_id, partitions) == partition)
            if named is not None
            else worker.hosts_by_partition.members(partition)
        )
        hosts = []
        for host_id in candidates:
            stored = table_value(worker.hosts, host_id)
            if stored is not None:
                hosts.append(HostSchedule.model_validate_json(stored))
        return hosts

    def holds_scanner(self, host_id: str, scanner: str) -> bool:
        """A schedule's command of `scanner` is in flight on the host (a live busy marker)."""
        busy_with = self.tables.marker(busy_key(host_id, scanner))
        if busy_with is None:
            return False
        return schedule_ledger.holds_scanner(busy_with, self.tables.entry(busy_with))

    async def scan_completed(self, result: ScanCompleted, origin: str) -> bool:
        """Release a schedule command's slot and report it; False: not a schedule command."""
        tables = self.tables
        succeeded = result.status is ScanStatus.SUCCEEDED
        outcome = ReleaseOutcome.COMPLETED if succeeded else ReleaseOutcome.FAILED
        entry = await self._ended(result.command_id, result.host_id, outcome, result.error, origin)
        if entry is None:
            return False
        if schedule_ledger.records_last_scan(entry, origin, succeeded=succeeded):
            last = last_scan_key(result.host_id, entry.scanner)
            await tables.put(tables.commands, last, result.completed_at.isoformat().encode())
        return True

    async def command_timed_out(self, signal: CommandTimedOut, origin: str) -> bool:
        """Report a schedule command's missed deadline; False: not a schedule command."""
        ended = await self._ended(
            signal.command_id, signal.host_id, ReleaseOutcome.TIMED_OUT, None, origin
        )
        return ended is not None

    async def _ended(
        self,
        command_id: str,
        host_id: str,
        outcome: ReleaseOutcome,
        error: str | None,
        origin: str,
    ) -> CommandEntry | None:
        """Mark a schedule command ended (see `schedule_commands`); None: not a schedule command.

        On its first end and on a replay of that input, the dispatcher's slot is released
        (a timeout's slot the dispatcher freed itself) and the run is told.
        """
        tables = self.tables
        entry = tables.entry(command_id)
        choice = end_choice(entry, host_id, origin)
        if entry is None or choice is EndChoice.NOT_OURS:
            return None
        if choice is EndChoice.DUPLICATE:
            tables.counters["duplicate_schedule_command_end"] += 1
            return entry
        if choice is EndChoice.END:
            busy = busy_key(host_id, entry.scanner)
            newest = last_ended_key(host_id, entry.scanner)
            end = schedule_ledger.ended(
                command_id,
                entry,
                outcome,
                error,
                origin,
                busy_with=tables.marker(busy),
                last_ended=tables.marker(newest),
            )
            entry = end.entry
            await tables.put(tables.commands, command_id, entry.model_dump_json().encode())
            if end.free_busy:
                await tables.delete(tables.commands, busy)
            if end.wake_host:
                tables.worker.wake_host(host_id)  # Its adaptive claim may be waiting.
            if end.forget is not None:
                await tables.delete(tables.commands, end.forget)
            await tables.put(tables.commands, newest, command_id.encode())
        release = schedule_ledger.slot_release(command_id, entry)
        if release is not None:
            await tables.worker.dispatch(release)
        report = schedule_ledger.end_report(command_id, entry)
        if report is not None:
            await tables.signal(entry.schedule_id, report)
        return entry
