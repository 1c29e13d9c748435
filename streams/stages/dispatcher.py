"""The dispatcher: the one place the fleet-wide in-flight cap lives.

It owns the single-partition dispatch queue and its table, so exactly one worker at a time
issues commands. Requests wait in priority DESC, due ASC order (`streams.policy.dispatch`);
an issued command's slot is durable in the changelog before the command leaves, and a failover
sends every in-flight command again with its own id.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kairos.floor.clock import Clock
from kairos.floor.settings import Settings
from schemas.base import WithdrawReason
from schemas.commands import ScanCommand
from schemas.config import SchedulerConfig
from schemas.internal import (
    ClaimWithdrawn,
    CommandTimedOut,
    CommandWithdrawn,
    DispatchBatch,
    DispatcherWoken,
    DispatchRequested,
    IssuedBeforeForce,
    ReleaseOutcome,
    SlotReleased,
)
from streams import codec
from streams.codec import Undecodable
from streams.direct import DirectSends
from streams.guard import Guard, Origin
from streams.metrics import WorkerMetrics
from streams.policy.dispatch import DispatchQueue
from streams.policy.ids import message_id
from streams.stages.control import Control
from streams.stages.dispatch_outbox import Outbox
from streams.stages.dispatch_recovery import DISPATCH_PARTITION, ReleasedMarkers, recovered

log = logging.getLogger(__name__)

DISPATCH_KEY = b"dispatch"
BATCH_MAX_BYTES = 500_000
"""Half of Kafka's default 1 MiB message limit: a batch never comes near it."""
RELEASED_MARKER_KEPT = timedelta(minutes=30)
"""Scheduler time a released command's marker is kept: longer than any replay or re-request."""


@dataclass(frozen=True)
class Pools:
    pools: dict[str, int]
    timeouts: dict[str, timedelta]


class Dispatcher:
    """Issues commands under the cap; only the owner of the dispatch partition acts."""

    def __init__(
        self,
        *,
        app: Any,
        settings: Settings,
        clock: Clock,
        control: Control,
        table: Any,
        topic: Any,
        direct: DirectSends,
        guard: Guard,
        metrics: WorkerMetrics,
        counters: Counter[str],
    ) -> None:
        self._app = app
        self.settings = settings
        self._names = settings.topics
        self._clock = clock
        self._control = control
        self.table = table
        self.topic = topic
        self._direct = direct
        self._guard = guard
        self._metrics = metrics
        self._counters = counters
        self.queue = DispatchQueue()
        self._woken_pending = False
        self.outbox = Outbox(settings, direct)
        """Issued commands, sent once their slots are durable (`send_issued_commands`)."""
        self._released = ReleasedMarkers(table, direct)
        self._blocked: tuple[int, int, int] | None = None
        """What the queue held after a pass that issued nothing while commands waited."""
        self._registry: tuple[int, Pools] | None = None

    async def request(self, request: DispatchRequested | SlotReleased | ClaimWithdrawn) -> None:
        """Queue a request or a release on the dispatch queue, in the order they are made."""
        await self._direct.send(
            self._names.dispatch_queue, DISPATCH_KEY, codec.encode(request), DISPATCH_PARTITION
        )

    async def request_all(
        self, messages: Sequence[DispatchRequested | SlotReleased | ClaimWithdrawn]
    ) -> None:
        """`request` for many, in their order, in as few records as stay well below Kafka's
        message limit (a schedule's request carries its args, up to 16 KiB)."""
        encoded = (codec.encode(message) for message in messages)
        for chunk in codec.size_bounded(encoded, BATCH_MAX_BYTES):
            await self._send_batch(chunk)

    async def _send_batch(self, encoded: list[bytes]) -> None:
        value = encoded[0] if len(encoded) == 1 else codec.dispatch_batch(encoded)
        await self._direct.send(self._names.dispatch_queue, DISPATCH_KEY, value, DISPATCH_PARTITION)

    async def agent(self, stream: Any) -> None:
        await self._control.ready.wait()
        async for event in stream.events():
            message = event.message
            origin = (message.topic, message.partition, message.offset, message.key, event.value)
            try:
                parsed = codec.decode(codec.dispatch_message, event.value)
            except Undecodable as error:
                parsed = await self._readable_part(origin, str(error))
                if parsed is None:
                    continue
            await self._guard.handled(origin, self.handle(parsed))

    async def _readable_part(self, origin: Origin, reason: str) -> DispatchBatch | None:
        """What can still be handled of a record that did not decode: the readable messages of
        a batch, each unreadable one dead-lettered alone; any other record is dead-lettered."""
        split = codec.split_dispatch_batch(origin[4])
        if split is None:
            await self._guard.dead_letter(*origin, reason)
            return None
        readable, unreadable = split
        for index, raw, why in unreadable:
            await self._guard.dead_letter(*origin[:4], raw, why, part=index)
        return DispatchBatch(messages=tuple(readable)) if readable else None

    async def handle(self, parsed: Any) -> None:
        # The pass's table records go as one batch when it ends, not a send each: only this
        # task writes the table. An issued command's slot is durable once that batch is.
        issued: list[ScanCommand] = []
        failed: Exception | None = None
        async with self._direct.batching() as acks:
            try:
                await self._handle(parsed, issued)
            except Exception as error:  # raised again once the slots written so far are out
                failed = error
        # Reached only if every batch of the pass went to the producer: the commands whose
        # slots were written leave once those are acknowledged, even from a pass that failed.
        if issued:
            self.outbox.add(issued, asyncio.gather(*acks))
        if failed is not None:
            raise failed

    async def _handle(self, parsed: Any, issued_commands: list[ScanCommand]) -> None:
        queue = self.queue
        table = self.table
        config = self._control.config
        direct = self._direct
        now = self._clock.now()
        queued: dict[str, None] = {}
        """Commands this record queued, in order: stored as waiting if they still are."""
        messages = parsed.messages if isinstance(parsed, DispatchBatch) else (parsed,)
        for message in messages:
            if isinstance(message, DispatchRequested):
                if queue.request(message):
                    queued[message.command_id] = None
                elif queue.issued_before_force(message):
                    await self._tell_issued_before_force(message)
            elif isinstance(message, SlotReleased):
                sent_again_for = message.host_id
                if sent_again_for is not None and queue.held_for_another_host(
                    message.command_id, sent_again_for
                ):
                    self._counters["releases_for_another_host"] += 1
                    continue
                if (
                    message.outcome is ReleaseOutcome.SUPERSEDED
                    and queue.waiting_request(message.command_id) is not None
                ):
                    self._count_withdrawn(WithdrawReason.DELETED)
                queue.release(message.command_id, message.outcome)
                await self._released.mark(message.command_id, now)
            elif isinstance(message, ClaimWithdrawn):
                await self._withdraw(message, now)
            elif isinstance(message, DispatcherWoken):
                self._woken_pending = False
        await self._released.forget_before(now - RELEASED_MARKER_KEPT)
        for expired in queue.expire(now):
            await self._released.mark(expired.command_id, now)
            self._counters["commands_timed_out"] += 1
            self._metrics.timeouts.inc()
            timed_out = CommandTimedOut(
                host_id=expired.host_id, command_id=expired.command_id, deadline=now
            )
            await direct.send(
                self._names.host_signals, expired.host_id.encode(), codec.encode(timed_out)
            )
        issued = queue.issue(
            now=now,
            # Off: nothing more is issued; what waits is held, in rank order, until it is on.
            cap=config.max_concurrent_scans if config.enabled else 0,
            timeout=timedelta(seconds=config.scan_timeout_seconds),
            aging_minutes=config.priority_aging_minutes,
            org_cap=config.max_concurrent_scans_per_organization,
            promise_guard_minutes=config.promise_guard_minutes,
            pools=self._pools(config).pools,
            timeouts=self._pools(config).timeouts,
        )
        # Nothing went out while some wait: until a message or a config change comes, every
        # pool they wait for stays full (or held), so a wake would find the same.
        self._blocked = (
            (queue.waiting_count, queue.in_flight_count, config.version)
            if not issued and queue.waiting_count
            else None
        )
        for command_id in queued:
            # Recorded as waiting only if it still is: an issued entry would replace it at once,
            # and a release in the same batch has left its marker.
            waiting = queue.waiting_request(command_id)
            if waiting is not None:
                entry = codec.dispatch_waiting(waiting)
                await direct.put_queued(table, command_id, entry, DISPATCH_PARTITION)
        for item in issued:
            command = item.command
            self._metrics.issued(
                reason=command.reason.value, due_at=command.due_at, issued_at=command.issued_at
            )
            slot = codec.dispatch_slot(
                item.request, issued_at=command.issued_at, deadline=command.deadline
            )
            await direct.put_queued(table, command.command_id, slot, DISPATCH_PARTITION)
            issued_commands.append(command)
        self._counters["commands_issued"] += len(issued)

    async def _withdraw(self, message: ClaimWithdrawn, now: datetime) -> None:
        """Drop a host's claim if it still waits, and tell the host it no longer holds one.

        A claim already issued runs to its end (its result or timeout tells the host), and so
        does one released meanwhile. One the queue never knew, or has forgotten, is answered
        too: otherwise its host would wait for an answer that never comes."""
        queue = self.queue
        command_id = message.command_id
        if queue.waiting_request(command_id) is not None:
            queue.release(command_id, ReleaseOutcome.WITHDRAWN)
            await self._released.mark(command_id, now)
            self._count_withdrawn(message.reason)
        elif queue.is_in_flight(command_id) or queue.was_released(command_id):
            return
        notice = CommandWithdrawn(
            event_id=message_id("command-withdrawn", command_id),
            host_id=message.host_id,
            command_id=command_id,
            reason=message.reason,
        )
        key = message.host_id.encode()
        await self._direct.send(self._names.host_signals, key, codec.encode(notice))

    def _count_withdrawn(self, reason: WithdrawReason) -> None:
        self._counters[f"commands_withdrawn_{reason.value}"] += 1
        self._metrics.withdrawn.inc(1, reason.value)

    def _pools(self, config: SchedulerConfig) -> Pools:
        """Each registered scanner's pool (0 while inactive: its commands are held) and the
        deadline of its commands; kept per config version."""
        cached = self._registry
        if cached is not None and cached[0] == config.version:
            return cached[1]
        registry = config.registry()
        pools = Pools(
            pools={spec.name: spec.max_concurrent if spec.is_active else 0 for spec in registry},
            timeouts={spec.name: timedelta(seconds=spec.timeout_seconds) for spec in registry},
        )
        self._registry = (config.version, pools)
        return pools

    async def _tell_issued_before_force(self, request: DispatchRequested) -> None:
        """The one case a host hears back from the dispatcher: its force came too late for
        the command it claimed, so it scans again once that command ends."""
        notice = IssuedBeforeForce(
            event_id=message_id("issued-before-force", request.command_id),
            host_id=request.host_id,
            command_id=request.command_id,
            incarnation=request.incarnation,
        )
        key = request.host_id.encode()
        await self._direct.send(self._names.host_signals, key, codec.encode(notice))

    async def wake_if_needed(self, now: datetime) -> None:
        """On the owner: a free slot with requests waiting, or a deadline passed, wakes it."""
        if self._woken_pending or not self.owned():
            return
        queue = self.queue
        deadline = queue.next_deadline()
        config = self._control.config
        capacity_free = (
            config.enabled
            and queue.waiting_count
            and queue.in_flight_count < config.max_concurrent_scans
            and self._blocked != (queue.waiting_count, queue.in_flight_count, config.version)
        )
        if capacity_free or (deadline is not None and deadline <= now):
            self._woken_pending = True
            woken = DispatcherWoken(at=now)
            await self.topic.send(key=DISPATCH_KEY, value=codec.encode(woken))

    def rebuild(self) -> Any:
        """The table's recovery callback: the queue again from the durable slots."""

        async def rebuild() -> None:
            state = await recovered(self.table, self._guard)
            self._released.reset(state.released)
            self.queue = queue = state.queue
            self._blocked = None  # Looked at afresh, not through what the last queue held.
            # Recovery runs on every worker; the partition's owner sends.
            resend = state.in_flight if self.owned() else []
            # A slot is durable before its command is sent, so a kill -9 in between leaves
            # commands that never went out. Send every in-flight one again with its own id:
            # agents dedupe on command_id, and this costs one record per in-flight command.
            self.outbox.add(resend, None)
            self._counters["commands_resent_after_recovery"] += len(resend)
            log.info(
                "dispatch queue rebuilt: %d waiting, %d in flight (%d sent again), %d released",
                queue.waiting_count,
                queue.in_flight_count,
                len(resend),
                len(state.released),
            )

        return rebuild()

    async def send_issued_commands(self) -> None:
        """The outbox's sending task (`Outbox.send_issued_commands`)."""
        await self.outbox.send_issued_commands()

    async def log_ownership(self, sender: Any = None, **kwargs: Any) -> None:
        """Operators (and the fault tests) read from the log which worker holds the cap."""
        log.info("dispatch partition %s by this worker", "owned" if self.owned() else "not owned")

    def owned(self) -> bool:
        actives = self._app.assignor.assigned_actives()
        return any(tp.topic == self._names.dispatch_queue for tp in actives)
