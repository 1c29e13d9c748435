"""The generic-schedule stage: thin adapters around `streams.policy.schedules`, `.targets` and
`.schedule_commands`, run by the host stage.

Schedule state lives where its key (the schedule id) lands: `schedule.*` events on
schedule-changes and the schedule signals (`schemas.internal`) that concern a schedule (all
but `ScheduleFanOut`), sent on kairos-host-signals keyed by schedule id, reach the partition
that holds its state, so every table write happens while an input of its partition is handled.

Hosts are partitioned by host id, so a run is fanned out: one `ScheduleFanOut` per partition
that can hold a target (all of them unless the run names its ids: static object ids, a
trigger or a retry). Each partition's owner selects its own hosts, sends their dispatch
requests and replies with `ScheduleFanOutDone`; when every reply is in, a scheduled run is
`run_dispatched`, while a trigger run, which the schedule state does not track, is only
recorded. Command ends come back as `ScheduleCommandEnded` for `run_finished`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import Counter, OrderedDict, defaultdict
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from kairos.floor.clock import Clock
from kairos.floor.settings import Settings
from schemas.base import Contract
from schemas.commands import ADAPTIVE_SCANNER
from schemas.internal import (
    CommandTimedOut,
    DispatchRequested,
    ReleaseOutcome,
    ScheduleCommandEnded,
    ScheduleDue,
    ScheduleFanOut,
    ScheduleFanOutDone,
    ScheduleFanOuts,
    ScheduleObjectEvent,
    SchedulesDue,
    SlotReleased,
)
from schemas.objects import ObjectEvent
from schemas.results import ScanCompleted, ScanStatus
from schemas.schedules import (
    RunPlan,
    Schedule,
    ScheduleRunRecorded,
    ScheduleState,
    ScheduleStateChanged,
    load_schedule_state,
)
from schemas.state import HostSchedule
from schemas.topics import TopicNames
from streams import codec, topology
from streams.codec import Undecodable
from streams.direct import PARTITION_IN_HAND, DirectSends, table_value
from streams.due_index import DueIndex
from streams.guard import Guard
from streams.partition_index import HostsByPartition, by_partition, partition_of
from streams.policy.fanout import PendingFanOuts, answered, fanned_out, held, unanswered
from streams.policy.schedule_commands import (
    CommandEntry,
    EndChoice,
    FanOutChoice,
    busy_key,
    counted_once,
    end_choice,
    fan_out_choice,
    last_ended_key,
    last_scan,
    last_scan_key,
    marked_ended,
)
from streams.policy.schedules import (
    ConcludedRun,
    DroppedOccurrence,
    ScheduleDecision,
    decide_schedule,
    due_runs,
    run_dispatched,
    run_finished,
    trigger_matches,
    wake_at,
)
from streams.policy.targets import dispatch_requests, select_targets


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


log = logging.getLogger(__name__)

FAN_OUTS_MAX_BYTES = 500_000
"""A ScheduleFanOuts record stays at half of Kafka's 1 MiB message limit."""
SCHEDULES_PER_DUE_SIGNAL = 1000
"""Keeps a SchedulesDue signal far below Kafka's 1 MiB message limit (ids: 128 chars at most)."""
STATES_KEPT = 2048
"""Decoded schedule states kept for reading again: twice a 1,000-schedule cron minute, so a
minute's runs read their states from memory while the cache stays bounded however many
schedules there are."""
RUN_TIMEOUT = timedelta(hours=24)
"""A tracked run still waiting for results after this is concluded as failed (lost replies)."""


_TRIGGER_SET = b'"trigger":{'
"""How a schedule with a trigger reads in a `ScheduleStateChanged` (pydantic's compact JSON)."""


def may_change_triggers(key: bytes | None, raw: bytes | None, triggers: Mapping[str, Any]) -> bool:
    """Whether a kairos-schedules record must be decoded to keep the trigger index true.

    Most records concern schedules without a trigger, known to have none: they are passed
    over undecoded (every worker reads the whole topic, and decoding every record would be
    work in each due pass for nothing). Every quote inside a JSON string is escaped, so
    `_TRIGGER_SET` only ever matches a key: a schedule with a trigger always holds it, and a
    key of that name in `args` only costs a decode.
    """
    if raw is None or key is None or _TRIGGER_SET in raw:
        return True
    return key.decode("utf-8", "replace") in triggers


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


def _named_targets(schedule: Schedule, run: RunPlan) -> Iterable[str] | None:
    """The object ids a run is limited to (trigger, retry, static ids); None: every host."""
    if run.object_id is not None:
        return (run.object_id,)
    if run.host_ids is not None:
        return run.host_ids
    return schedule.targets.object_ids


def _counted_key(schedule_id: str, host_id: str) -> str:
    """Schedule side: the commands of this schedule on this host whose end was counted."""
    return f"counted:{schedule_id}/{host_id}"


DROPPED_RECORDS_PER_DECISION = 100
"""Run records for dropped occurrences per decision; the state's counters count them all."""


def skip_reason(skipped_hosts: dict[str, int]) -> str:
    """Why a run issued nothing: no host matched, or all targeted hosts skipped for a reason."""
    if not skipped_hosts:
        return "no_host_matched"
    if len(skipped_hosts) == 1:
        (reason,) = skipped_hosts
        return f"all_{reason}"
    return "all_skipped:" + ",".join(sorted(skipped_hosts))


class ScheduleStage:
    """Tables and in-memory indexes of the schedule stage, beside the host stage in one worker."""

    def __init__(self, worker: StageHost, app: Any, direct: DirectSends) -> None:
        self.worker = worker
        settings = worker.settings
        self.partitions = settings.partitions
        self.due_index = DueIndex()
        self.triggers: dict[str, Schedule] = {}
        self.counters: Counter[str] = Counter()
        self._names = worker.names
        self._fan_outs: defaultdict[int, list[ScheduleFanOut]] | None = None
        """While a pass over many schedules runs: its fan-outs by destination partition."""
        self._assignor = app.assignor
        self._loaded: OrderedDict[str, tuple[bytes, ScheduleState]] = OrderedDict()
        """The states last read or stored (`STATES_KEPT` at most, least recently used out),
        each with the very bytes the table holds for it; other bytes under the key are read
        afresh. A run's schedule is read again for its decision's store, for every partition's
        fan-out reply and for every command's end, so keeping only the last one decoded
        would decode the same states again and again."""
        # Every table write and send of this stage goes straight to the producer, as the host
        # stage's do (see `streams.direct`): Faust's per-record path cost more than the stage.
        self._direct = direct
        self.table = topology.SCHEDULES.declare(app, settings)
        self.fanouts = topology.SCHEDULE_FANOUTS.declare(app, settings)
        # Host side, the ledger of `streams.policy.schedule_commands`: command id -> entry;
        # "busy:", "ended:" and "last:" + host/scanner.
        self.commands = topology.SCHEDULE_COMMANDS.declare(app, settings)
        self.table.on_recover(self._rebuild_due_index)
        app.task(self._follow_schedules)

    # --- inputs routed by the host stage ------------------------------------------------
    async def handle(
        self, topic: str, partition: int, offset: int, key: bytes | None, raw: bytes | None
    ) -> None:
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
            await self._fan_out_here(parsed, partition, now)
            return
        if isinstance(parsed, ScheduleFanOuts):
            await self._fan_outs_here(parsed, topic, partition, offset, now)
            return
        if isinstance(parsed, SchedulesDue):
            await self._wake_schedules(parsed, topic, partition, offset, now)
            return
        schedule_id: str = parsed.schedule_id
        if key is None or key.decode("utf-8", "replace") != schedule_id:
            reason = f"key {key!r} must equal the schedule id {schedule_id!r}"
            await worker.guard.dead_letter(topic, partition, offset, key, raw, reason)
            return
        await self._handle_due_or_keyed(
            schedule_id, parsed, now, (topic, partition, offset, key, raw)
        )

    async def _wake_schedules(
        self, due: SchedulesDue, topic: str, partition: int, offset: int, now: datetime
    ) -> None:
        """Each schedule as if it had its own `ScheduleDue`; one's failure parks only that one.

        The runs they start are fanned out at the end, one record per destination partition
        (handled here for this worker's own partitions), and their claims go out at once."""
        async with self._gathering_fan_outs():
            for schedule_id in due.schedule_ids:
                signal = ScheduleDue(schedule_id=schedule_id, wake_at=due.wake_at)
                raw = partial(codec.encode, signal)
                origin = (topic, partition, offset, schedule_id.encode(), raw)
                await self.worker.guard.handled(
                    origin, self._handle_due_or_keyed(schedule_id, signal, now, origin)
                )
        # The signals of one tick are fetched together: the next passes must not hold these
        # claims back. They go out now, and the consumer lets the dispatcher have its records
        # before the next pass (a slice would otherwise run several passes).
        await self.worker.send_gathered()
        self.worker.hand_over()

    @contextlib.asynccontextmanager
    async def _gathering_fan_outs(self) -> AsyncIterator[None]:
        """Fan-outs made inside go out when it ends (also by an error), one record per
        destination partition: a stream pass there costs more than the fan-out it carries.

        Those of this worker's own partitions that name their targets are handled at once
        instead. As records they would wait behind every other due signal of the tick, fetched
        together (a cron minute's first command came only after all its due passes); their
        recovery is the records' own: a fan-out a crash cut short is sent again
        (`_fan_out_again`). A fan-out over every host stays a record: handled here it would
        hold the loop for all the worker's partitions at once."""
        if self._fan_outs is not None:
            yield
            return
        self._fan_outs = gathered = defaultdict(list)
        try:
            yield
        finally:
            self._fan_outs = None
            topic = self._names.host_signals
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
                    named = _named_targets(fan_out.schedule, fan_out.run) is not None
                    (in_hand if named and partition in owned else records).append(fan_out)
                if in_hand:
                    await self._fan_outs_in_hand(in_hand, partition)
                if records:
                    await self._send_fan_outs(partition, [encoded_once(f) for f in records])

    async def _fan_outs_in_hand(self, fan_outs: list[ScheduleFanOut], partition: int) -> None:
        """Each fan-out handled as if its record had come on `partition`, under its own guard."""
        worker = self.worker
        now = worker.clock.now()
        in_hand = PARTITION_IN_HAND.set(partition)  # The host-side tables' writes go there.
        try:
            async with worker.gathering():
                for fan_out in fan_outs:
                    key, raw = fan_out.schedule.id.encode(), partial(codec.encode, fan_out)
                    origin = (self._names.host_signals, partition, None, key, raw)
                    await worker.guard.handled(origin, self._fan_out_here(fan_out, partition, now))
        finally:
            PARTITION_IN_HAND.reset(in_hand)

    async def _send_fan_outs(self, partition: int, encoded: list[bytes]) -> None:
        """In records that stay well below Kafka's message limit (a schedule's args alone may
        be 16 KiB)."""
        for chunk in codec.size_bounded(encoded, FAN_OUTS_MAX_BYTES):
            value = chunk[0] if len(chunk) == 1 else codec.schedule_fan_outs(chunk)
            await self.worker.signal(None, value, partition)

    async def _fan_outs_here(
        self, batch: ScheduleFanOuts, topic: str, partition: int, offset: int, now: datetime
    ) -> None:
        """Each fan-out as if it came alone, under its own guard; one record of claims."""
        worker = self.worker
        async with worker.gathering():
            for fan_out in batch.fan_outs:
                key = fan_out.schedule.id.encode()
                origin = (topic, partition, offset, key, partial(codec.encode, fan_out))
                await worker.guard.handled(origin, self._fan_out_here(fan_out, partition, now))

    async def _handle_due_or_keyed(
        self, schedule_id: str, parsed: Any, now: datetime, origin: tuple[Any, ...]
    ) -> None:
        await self._handle_keyed(schedule_id, parsed, now, origin)
        # Whatever happened, the due index follows the stored state (a tick popped it).
        after = self._load(schedule_id)
        self.due_index.set(schedule_id, wake_at(after) if after else None)
        if isinstance(parsed, ScheduleDue) and after is not None:
            again = wake_at(after)
            if again is not None and again <= now:  # A backlog: the next batch.
                await self._signal(schedule_id, ScheduleDue(schedule_id=schedule_id, wake_at=now))

    async def _handle_keyed(
        self, schedule_id: str, parsed: Any, now: datetime, origin: tuple[Any, ...]
    ) -> None:
        state = self._load(schedule_id)
        match parsed:
            case ScheduleDue():
                if state is None:
                    return
                decision = due_runs(state, now=now, run_timeout=RUN_TIMEOUT)
            case ScheduleFanOutDone():
                await self._collect(state, parsed, now)
                return
            case ScheduleCommandEnded():
                await self._run_command_ended(state, parsed, now)
                return
            case ScheduleObjectEvent():
                decision = decide_schedule(state, parsed.event, now=now)
            case _:
                decision = decide_schedule(state, parsed, now=now)
        if decision.rejection is not None:
            await self.worker.guard.dead_letter(*origin, decision.rejection)
            return
        await self._settle(schedule_id, state, decision, now)

    async def route_object_event(self, event: ObjectEvent) -> None:
        """Hand an object event to every trigger schedule it matches (keyed by schedule id)."""
        for schedule in list(self.triggers.values()):
            if trigger_matches(schedule, event):
                message = ScheduleObjectEvent(schedule_id=schedule.id, event=event)
                await self._signal(schedule.id, message)

    async def scan_completed(self, result: ScanCompleted, origin: str) -> bool:
        """Release a schedule command's slot and report it; False: not a schedule command."""
        succeeded = result.status is ScanStatus.SUCCEEDED
        outcome = ReleaseOutcome.COMPLETED if succeeded else ReleaseOutcome.FAILED
        entry = await self._command_ended(
            result.command_id, result.host_id, outcome, result.error, origin
        )
        if entry is None:
            return False
        if succeeded and entry.ended_by == origin:
            last = last_scan_key(result.host_id, entry.scanner)
            await self._put(self.commands, last, result.completed_at.isoformat().encode())
        return True

    async def command_timed_out(self, signal: CommandTimedOut, origin: str) -> bool:
        """Report a schedule command's missed deadline; False: not a schedule command."""
        ended = await self._command_ended(
            signal.command_id, signal.host_id, ReleaseOutcome.TIMED_OUT, None, origin
        )
        return ended is not None

    # --- the timer --------------------------------------------------------------------
    async def tick(self, now: datetime) -> None:
        """One `SchedulesDue` per partition for the schedules due by `now`."""
        due = (schedule_id for schedule_id, _ in self.due_index.pop_due(now))
        for partition, schedule_ids in by_partition(due, self.partitions, SCHEDULES_PER_DUE_SIGNAL):
            signal = SchedulesDue(schedule_ids=schedule_ids, wake_at=now)
            await self.worker.signal(None, codec.encode(signal), partition)

    # --- state ------------------------------------------------------------------------
    def _load(self, schedule_id: str) -> ScheduleState | None:
        stored = table_value(self.table, schedule_id)
        if not stored:
            return None
        loaded = self._loaded.get(schedule_id)
        if loaded is not None and loaded[0] is stored:
            self._loaded.move_to_end(schedule_id)
            return loaded[1]
        state = load_schedule_state(json.loads(stored))
        self._keep_loaded(schedule_id, stored, state)
        return state

    def _keep_loaded(self, schedule_id: str, stored: bytes, state: ScheduleState) -> None:
        loaded = self._loaded
        loaded[schedule_id] = (stored, state)
        loaded.move_to_end(schedule_id)
        if len(loaded) > STATES_KEPT:
            loaded.popitem(last=False)

    async def _settle(
        self,
        schedule_id: str,
        before: ScheduleState | None,
        decision: ScheduleDecision,
        now: datetime,
    ) -> None:
        """Start the decision's runs, then store and publish the state it leaves."""
        if decision.ignored:
            self.counters[f"ignored_{decision.ignored}"] += 1
        state = decision.state
        changed = decision.changed
        for run in decision.runs:
            assert state is not None
            state, started_changed = await self._start(state, run, now)
            changed = changed or started_changed
        for event in decision.events:
            await self._send(self._names.schedule_changes, schedule_id, codec.encode(event))
        incarnation = state.incarnation if state else None
        await self._record_dropped(schedule_id, incarnation, decision.dropped, now)
        await self._record_concluded(schedule_id, incarnation, decision.concluded, now)
        if changed:
            await self._store(schedule_id, before, state, now)

    async def _record_dropped(
        self,
        schedule_id: str,
        incarnation: str | None,
        dropped: Iterable[DroppedOccurrence],
        now: datetime,
    ) -> None:
        for number, occurrence in enumerate(dropped):
            if number >= DROPPED_RECORDS_PER_DECISION:
                self.counters["dropped_records_not_written"] += 1
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
            await self._send(self._names.schedule_runs, schedule_id, codec.encode(record))

    async def _record_concluded(
        self,
        schedule_id: str,
        incarnation: str | None,
        concluded: Iterable[ConcludedRun],
        now: datetime,
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
            await self._send(self._names.schedule_runs, schedule_id, codec.encode(record))

    async def _store(
        self,
        schedule_id: str,
        before: ScheduleState | None,
        state: ScheduleState | None,
        now: datetime,
    ) -> None:
        encoded = None
        if state is None:
            self._loaded.pop(schedule_id, None)
            await self._delete(self.table, schedule_id)
            await self._delete(self.fanouts, schedule_id)
            counted = _counted_key(schedule_id, "")
            for key in [k for k in list(self.fanouts.keys()) if k.startswith(counted)]:
                await self._delete(self.fanouts, key)
        else:
            encoded = state.model_dump_json(exclude_none=True).encode()
            await self._put(self.table, schedule_id, encoded)
            self._keep_loaded(schedule_id, encoded, state)
        version = state.version if state else (before.version + 1 if before else 0)
        change = codec.schedule_state_changed_record(schedule_id, version, encoded, now)
        await self._send(self._names.schedules, schedule_id, change)
        self.due_index.set(schedule_id, wake_at(state) if state else None)

    async def _start(
        self, state: ScheduleState, run: RunPlan, now: datetime
    ) -> tuple[ScheduleState, bool]:
        """Fan the run out to the partitions that may hold its targets."""
        schedule = state.schedule
        partitions = self._fan_out_partitions(schedule, run)
        if not partitions:
            return await self._dispatched(state, run, 0, 0, now, {})
        if run.tracked:
            await self._keep_pending(
                schedule.id, fanned_out(self._pending(schedule.id), run, len(partitions))
            )
        fan_out = ScheduleFanOut(schedule=schedule, run=run, expected=len(partitions))
        if self._fan_outs is not None:
            for partition in partitions:
                self._fan_outs[partition].append(fan_out)
            return state, False
        encoded = codec.encode(fan_out)
        for partition in partitions:
            await self.worker.signal(schedule.id.encode(), encoded, partition)
        return state, False

    def _fan_out_partitions(self, schedule: Schedule, run: RunPlan) -> list[int]:
        """The partitions that may hold the run's targets: those of its named ids, else all."""
        wanted = _named_targets(schedule, run)
        if wanted is None:
            return list(range(self.partitions))
        return sorted({partition_of(object_id, self.partitions) for object_id in wanted})

    async def _fan_out_again(self, state: ScheduleState, pending: PendingFanOuts) -> int:
        """Recovery: the fan-outs of the runs some partition has not answered, sent again to
        those partitions (see `unanswered`). Returns how many were sent."""
        schedule = state.schedule
        sent = 0
        for tally in unanswered(pending):
            fan_out = ScheduleFanOut(schedule=schedule, run=tally.run, expected=tally.expected)
            encoded = codec.encode(fan_out)
            for partition in self._fan_out_partitions(schedule, tally.run):
                if partition not in tally.parts:
                    await self.worker.signal(schedule.id.encode(), encoded, partition)
                    sent += 1
        return sent

    def _pending(self, schedule_id: str) -> PendingFanOuts:
        stored = table_value(self.fanouts, schedule_id)
        return PendingFanOuts.model_validate_json(stored) if stored else PendingFanOuts()

    async def _keep_pending(self, schedule_id: str, pending: PendingFanOuts) -> None:
        encoded = pending.model_dump_json(exclude_none=True).encode()
        await self._put(self.fanouts, schedule_id, encoded)

    async def _collect(
        self, state: ScheduleState | None, done: ScheduleFanOutDone, now: datetime
    ) -> None:
        run = done.run
        if not run.tracked:
            await self._record_fired(run, done.issued, done.skipped, now, done.skipped_hosts)
            return
        if state is None:
            return
        result = answered(self._pending(state.schedule.id), done)
        if result.duplicate:
            self.counters["duplicate_fanout_reply"] += 1
            return
        await self._keep_pending(state.schedule.id, result.pending)
        tally = result.dispatched
        if tally is None:
            return
        after, changed = await self._dispatched(
            state, run, tally.issued, tally.skipped, now, tally.skipped_hosts
        )
        if changed:
            await self._store(state.schedule.id, state, after, now)
        for ended in result.ends:
            await self._run_command_ended(self._load(state.schedule.id), ended, now)

    async def _dispatched(
        self,
        state: ScheduleState,
        run: RunPlan,
        issued: int,
        skipped: int,
        now: datetime,
        skipped_hosts: dict[str, int],
    ) -> tuple[ScheduleState, bool]:
        await self._record_fired(run, issued, skipped, now, skipped_hosts)
        decision = run_dispatched(state, run, issued, now=now)
        after = decision.state
        assert after is not None
        changed = decision.changed
        # A run that issued nothing was recorded as skipped just above.
        ended = [
            c
            for c in decision.concluded
            if (c.occurrence, c.attempt) != (run.occurrence, run.attempt)
        ]
        await self._record_dropped(state.schedule.id, after.incarnation, decision.dropped, now)
        await self._record_concluded(state.schedule.id, after.incarnation, ended, now)
        for released in decision.runs:
            after, started_changed = await self._start(after, released, now)
            changed = changed or started_changed
        return after, changed

    async def _record_fired(
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
        await self._send(self._names.schedule_runs, run.schedule_id, codec.encode(record))

    async def _run_command_ended(
        self, state: ScheduleState | None, ended: ScheduleCommandEnded, now: datetime
    ) -> None:
        if state is None:
            return
        counted = _counted_key(state.schedule.id, ended.host_id)
        stored = table_value(self.fanouts, counted)
        recent: list[str] = json.loads(stored) if stored else []
        fresh, remembered = counted_once(recent, ended.command_id)
        if not fresh:
            # A replayed end report (killed after the report, before the offset commit).
            self.counters["duplicate_schedule_end_report"] += 1
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
            pending = held(self._pending(state.schedule.id), ended)
            await self._keep_pending(state.schedule.id, pending)
            return
        if decision.ignored is None:
            await self._put(self.fanouts, counted, codec.dumps(list(remembered)))
        await self._settle(state.schedule.id, state, decision, now)

    # --- the host side of a fan-out ----------------------------------------------------
    async def _fan_out_here(self, fan_out: ScheduleFanOut, partition: int, now: datetime) -> None:
        worker = self.worker
        schedule, run = fan_out.schedule, fan_out.run
        hosts = self._hosts_for(schedule, run, partition)
        scanner = schedule.scanner
        last_scans: dict[str, datetime] = {}
        for host in hosts:
            if scanner == ADAPTIVE_SCANNER and host.last_scan_completed:
                last_scans[host.host_id] = host.last_scan_completed
            stored = last_scan(table_value(self.commands, last_scan_key(host.host_id, scanner)))
            if stored is not None:
                last_scans[host.host_id] = stored
        selection = select_targets(schedule, run, hosts, now=now, last_scan_by_scanner=last_scans)
        mine = [h for h in selection.host_ids if partition_of(h, self.partitions) == partition]
        states = {host.host_id: host.state for host in hosts}
        # The adaptive schedule's command in flight occupies the adaptive scanner too.
        adaptive_busy = {
            host.host_id
            for host in hosts
            if scanner == ADAPTIVE_SCANNER and host.in_flight is not None
        }
        skipped_hosts = Counter(
            reason.value for host_id, reason in selection.skipped.items()
            if partition_of(host_id, self.partitions) == partition
        )  # fmt: skip
        issued = 0
        # The claims of this partition's hosts go to the dispatcher as one record.
        async with worker.gathering():
            for request in dispatch_requests(schedule, run, mine, states=states):
                entry = self._entry(request.command_id)
                busy = busy_key(request.host_id, scanner)
                held = table_value(self.commands, busy)
                holder = self._entry(held.decode()) if held is not None else None
                choice = fan_out_choice(
                    entry, held.decode() if held is not None else None, busy_entry=holder
                )
                if entry is None and request.host_id in adaptive_busy:
                    choice = FanOutChoice.BUSY
                if choice is FanOutChoice.BUSY:
                    skipped_hosts["busy"] += 1
                    self.counters["skipped_busy"] += 1
                    continue
                issued += 1
                if choice is FanOutChoice.ENDED:
                    continue
                if choice is FanOutChoice.SEND:
                    entry = CommandEntry(
                        schedule_id=schedule.id,
                        occurrence=run.occurrence,
                        attempt=run.attempt,
                        host_id=request.host_id,
                        scanner=scanner,
                        tracked=run.tracked,
                    )
                    encoded = entry.model_dump_json().encode()
                    await self._put(self.commands, request.command_id, encoded)
                await self._put(self.commands, busy, request.command_id.encode())
                await worker.dispatch(request)
        done = ScheduleFanOutDone(
            schedule_id=schedule.id,
            run=run,
            partition=partition,
            issued=issued,
            skipped=len(mine) - issued,
            skipped_hosts=dict(skipped_hosts),
        )
        await self._signal(schedule.id, done)

    def _hosts_for(self, schedule: Schedule, run: RunPlan, partition: int) -> list[HostSchedule]:
        """The hosts of `partition` the run may target: named ones looked up, else all."""
        worker = self.worker
        named = _named_targets(schedule, run)
        candidates = (
            (host_id for host_id in named if partition_of(host_id, self.partitions) == partition)
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
        held = table_value(self.commands, busy_key(host_id, scanner))
        if held is None:
            return False
        holder = self._entry(held.decode())
        choice = fan_out_choice(None, held.decode(), busy_entry=holder)
        return choice is FanOutChoice.BUSY

    def _entry(self, command_id: str) -> CommandEntry | None:
        stored = table_value(self.commands, command_id)
        return CommandEntry.model_validate_json(stored) if stored else None

    async def _command_ended(
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
        entry = self._entry(command_id)
        choice = end_choice(entry, host_id, origin)
        if entry is None or choice is EndChoice.NOT_OURS:
            return None
        if choice is EndChoice.DUPLICATE:
            self.counters["duplicate_schedule_command_end"] += 1
            return entry
        if choice is EndChoice.END:
            entry = marked_ended(entry, outcome, error, origin)
            await self._put(self.commands, command_id, entry.model_dump_json().encode())
            busy = busy_key(host_id, entry.scanner)
            held = table_value(self.commands, busy)
            if held is not None and held.decode() == command_id:
                await self._delete(self.commands, busy)
                if entry.scanner == ADAPTIVE_SCANNER:
                    self.worker.wake_host(host_id)  # Its adaptive claim may be waiting.
            newest = last_ended_key(host_id, entry.scanner)
            previous = table_value(self.commands, newest)
            if previous is not None and previous.decode() != command_id:
                await self._delete(self.commands, previous.decode())
            await self._put(self.commands, newest, command_id.encode())
        assert entry.ended is not None
        if entry.ended is not ReleaseOutcome.TIMED_OUT:
            release = SlotReleased(command_id=command_id, outcome=entry.ended)
            await self.worker.dispatch(release)
        if entry.tracked:
            report = ScheduleCommandEnded(
                schedule_id=entry.schedule_id,
                occurrence=entry.occurrence,
                attempt=entry.attempt,
                command_id=command_id,
                host_id=host_id,
                outcome=entry.ended,
                error=entry.error,
            )
            await self._signal(entry.schedule_id, report)
        return entry

    async def _signal(self, schedule_id: str, message: Contract) -> None:
        await self.worker.signal(schedule_id.encode(), codec.encode(message))

    async def _send(self, topic: str, schedule_id: str, value: bytes) -> None:
        """A record keyed by schedule id, on the partition the producer's partitioner would pick.

        Like the stage's table writes (`_put`), it is `queue`d: inside the host stage's pass it
        goes out with the pass's batches, one per topic partition, rather than an aiokafka
        `send` per record. Only this stage writes these topics and its tables'
        changelogs, always through `queue`, so two records for one schedule keep their order."""
        partition = partition_of(schedule_id, self.partitions)
        await self._direct.queue(topic, schedule_id.encode(), value, partition)

    async def _put(self, table: Any, key: str, value: bytes) -> None:
        await self._direct.put_here(table, key, value)

    async def _delete(self, table: Any, key: str) -> None:
        if key in table.data:  # As `table.pop(key, None)`: no tombstone for a key never set.
            await self._direct.put_here(table, key, None)

    # --- recovery and the trigger index ------------------------------------------------
    def _rebuild_due_index(self) -> Awaitable[None]:
        async def rebuild() -> None:
            self.due_index.clear()
            fanned_out_again = 0
            for schedule_id, stored in list(self.table.items()):
                try:
                    state = load_schedule_state(json.loads(stored))
                except Exception as error:  # Faust would swallow it and stop the rebuild.
                    await self.worker.guard.unreadable_state(self.table, schedule_id, stored, error)
                    continue
                self.due_index.set(schedule_id, wake_at(state))
                try:
                    pending = self._pending(schedule_id)
                except ValueError as error:  # Unreadable: its runs wait for the run timeout.
                    stored_pending = table_value(self.fanouts, schedule_id)
                    await self.worker.guard.unreadable_state(
                        self.fanouts, schedule_id, stored_pending, error
                    )
                    continue
                fanned_out_again += await self._fan_out_again(state, pending)
            log.info(
                "schedule due index rebuilt: %d schedules, %d fan-outs sent again",
                len(self.due_index),
                fanned_out_again,
            )

        return rebuild()

    async def _follow_schedules(self) -> None:
        """Read kairos-schedules whole: every worker knows every trigger schedule."""
        worker = self.worker
        consumer = AIOKafkaConsumer(
            **worker.settings.kafka_client_options(), enable_auto_commit=False, group_id=None
        )
        await consumer.start()
        try:
            topic = worker.names.schedules
            assigned = [TopicPartition(topic, p) for p in range(self.partitions)]
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*assigned)
            while True:
                batches = await consumer.getmany(*assigned, timeout_ms=500)
                for records in batches.values():
                    for record in records:
                        self._on_schedule_record(record.key, record.value)
        finally:
            await consumer.stop()

    def _on_schedule_record(self, key: bytes | None, raw: bytes | None) -> None:
        if not may_change_triggers(key, raw, self.triggers):
            return
        try:
            record: ScheduleStateChanged = codec.decode(codec.schedule_state_changed, raw)
        except Undecodable:
            return
        state = record.state
        if state is None or state.schedule.trigger is None:
            self.triggers.pop(record.schedule_id, None)
        else:
            self.triggers[record.schedule_id] = state.schedule


__all__ = [
    "ScheduleStage",
    "is_schedule_message",
    "may_change_triggers",
]
