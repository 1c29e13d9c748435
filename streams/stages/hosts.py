"""The host stage: one schedule per host, kept in the `hosts` table on the host's partition.

It reads object-created, schedule-changes, scan-completed and kairos-host-signals a fetch at
a time (the worker's consumer hands it each fetch's records of them: `streams.consumer`),
folds each host's message into the host's schedule with the pure policy
(`streams.policy.host.decide`), and claims the host's next command from the dispatcher when
it is due; a batch's claims and releases go to the dispatcher as one record. The schedule
stage runs inside it, since its messages ride the same topics:
`schedule.*` messages go to it, results and timeouts go to it first (it keeps the ledger of
schedule commands), and object events are passed on to the trigger schedules they match.
Config changes go to `Control`. The due index (wake-up times of this worker's hosts) is
rebuilt from the table on recovery.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta
from functools import cached_property, partial
from typing import Any

from kairos.floor.clock import Clock
from kairos.floor.settings import Settings
from schemas.changes import (
    ConfigUpdated,
    HostsInitializeRequested,
    ScannerUpserted,
    SchedulerToggled,
)
from schemas.commands import ADAPTIVE_SCANNER
from schemas.internal import (
    ClaimWithdrawn,
    CommandTimedOut,
    DispatchRequested,
    HostDue,
    HostsDue,
    SlotReleased,
)
from schemas.objects import ObjectEvent
from schemas.results import ScanCompleted
from schemas.state import STATE_FORMAT, HostSchedule
from schemas.topics import TopicNames
from streams import codec
from streams.codec import Undecodable
from streams.direct import PARTITION_IN_HAND, DirectSends, table_value
from streams.due_index import DueIndex
from streams.guard import Guard, Origin
from streams.metrics import WorkerMetrics
from streams.partition_index import HostsByPartition, by_partition
from streams.policy.host import Decision, decide, unissued_claim, wake_at, withdrawal_pending
from streams.policy.schedule_commands import origin_of
from streams.routing import Router
from streams.stages.control import Control
from streams.stages.dispatcher import Dispatcher
from streams.stages.schedules import ScheduleStage, is_schedule_message

log = logging.getLogger(__name__)

HOSTS_PER_DUE_SIGNAL = 100
"""A HostsDue signal is handled whole: 100 wakes take tens of milliseconds, inside the
consumer's slice of time (`streams.consumer.SLICE_SECONDS`), and the record stays far below
Kafka's 1 MiB message limit."""
BUSY_RECHECK = timedelta(seconds=30)
"""How often a host held back by a schedule's command of its scanner is looked at again."""
DERIVED_RECORD_MAX_BYTES = 900_000
"""Below the producer's 1,000,000-byte request limit, with room for the record's envelope."""


def input_topics(names: TopicNames) -> tuple[str, ...]:
    """The host stage's inputs, all keyed by host (or schedule) id and co-partitioned."""
    return (names.object_created, names.schedule_changes, names.scan_completed, names.host_signals)


class DerivedRecordTooLarge(ValueError):
    """A record derived from one input would exceed Kafka's message limit; the input is parked."""


class HostStage:
    """Hosts of this worker's partitions; also what the schedule stage uses of the worker."""

    schedule_stage: ScheduleStage
    """Set once both stages exist: each needs the other."""

    def __init__(
        self,
        *,
        settings: Settings,
        clock: Clock,
        control: Control,
        dispatcher: Dispatcher,
        hosts: Any,
        host_signals: Any,
        direct: DirectSends,
        guard: Guard,
        metrics: WorkerMetrics,
        counters: Counter[str],
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.names = settings.topics
        self.topics = frozenset(input_topics(self.names))
        """The topics whose records the consumer hands to `handle_batch` (streams.consumer)."""
        self.hosts = hosts
        self.host_signals = host_signals
        self.hosts_by_partition = HostsByPartition(settings.partitions)
        self.due_index = DueIndex()
        self._control = control
        self._dispatcher = dispatcher
        self._direct = direct
        self.guard = guard
        self._metrics = metrics
        self._counters = counters
        self._gathered: list[DispatchRequested | SlotReleased | ClaimWithdrawn] | None = None
        """While a pass over many hosts runs: their requests, sent as one batch at its end."""
        self._handing_over = False
        """The consumer's slice ends after the record in hand (`hand_over`)."""

    async def agent(self, stream: Any) -> None:
        """Subscribes the worker to `topics`. The consumer hands their records to
        `handle_batch` before Faust's conductor sees them; one that came here is handled alike."""
        async for event in stream.events():
            await self.handle_batch([event.message], lambda: True)

    async def handle_batch(self, records: Sequence[Any], go_on: Callable[[], bool]) -> int:
        """Handle a fetch's records in order; their requests go to the dispatcher together.

        Stops before a record once `go_on()` is False (the worker is handing partitions over,
        or the consumer's slice of time is up); returns how many were handled.
        """
        await self._control.ready.wait()
        handled = 0
        forward_to = self._router.destination
        queue = self._direct.queue
        # The hosts changelog, the schedule stage's changelogs and its topics are written by
        # this pass alone: their records go out as one batch per partition
        # (`DirectSends.batching`).
        async with self._direct.batching(), self.gathering():
            for message in records:
                if not go_on() or self._handing_over:
                    break
                topic, partition, key, value = (
                    message.topic,
                    message.partition,
                    message.key,
                    message.value,
                )
                # A keyed record off its key's partition (a producer with another partitioner)
                # is the business of that partition's owner: sent there as it is, with the
                # batch, and handled here only in that its offset may be committed once the
                # producer is flushed (`streams.routing`).
                target = forward_to(topic, partition, key, value)
                if target is not None:
                    await queue(topic, key, value, target, message.headers or ())
                    handled += 1
                    continue
                origin = (topic, partition, message.offset, key, value)
                in_hand = PARTITION_IN_HAND.set(partition)
                try:
                    await self.guard.handled(origin, self.handle(*origin))
                finally:
                    PARTITION_IN_HAND.reset(in_hand)
                handled += 1
        return handled

    @cached_property
    def _router(self) -> Router:
        """What `handle_batch` asks where each input record belongs."""
        return Router(
            partitions=self.settings.partitions,
            host_signals=self.names.host_signals,
            forwarded=self._metrics.forwarded,
        )

    async def handle(
        self, topic: str, partition: int, offset: int, key: bytes | None, raw: bytes | None
    ) -> None:
        names = self.names
        origin: Origin = (topic, partition, offset, key, raw)
        if topic in (names.schedule_changes, names.host_signals) and is_schedule_message(raw):
            await self.schedule_stage.handle(topic, partition, offset, key, raw)
            return
        try:
            parsed = codec.decode(self._adapter_for(topic), raw)
            host_id = _host_id_of(parsed)
        except Undecodable as error:
            await self.guard.dead_letter(*origin, str(error))
            return
        if isinstance(parsed, HostsDue):
            await self._wake_hosts(parsed, topic, partition, offset)
            return
        here = origin_of(topic, partition, offset)
        stage = self.schedule_stage
        if isinstance(parsed, ScanCompleted) and await stage.scan_completed(parsed, here):
            return
        if isinstance(parsed, CommandTimedOut) and await stage.command_timed_out(parsed, here):
            return
        if isinstance(
            parsed, ConfigUpdated | SchedulerToggled | ScannerUpserted | HostsInitializeRequested
        ):
            await self._control.change(parsed, origin)
            return
        if key is None or key.decode("utf-8", "replace") != host_id:
            reason = f"key {key!r} must equal the host id {host_id!r} (host-keyed topic)"
            if not isinstance(parsed, ObjectEvent) or parsed.object_type == "host":
                await self.guard.dead_letter(*origin, reason)
                return
        decision = await self._fold(host_id, partition, parsed, stage.holds_scanner)
        if isinstance(parsed, ScanCompleted) and not decision.ignored:
            self._metrics.results_applied.inc()
        if isinstance(parsed, ObjectEvent):
            await stage.route_object_event(parsed)

    def _adapter_for(self, topic: str) -> Any:
        names = self.names
        return {
            names.object_created: codec.object_event,
            names.schedule_changes: codec.schedule_change,
            names.scan_completed: codec.scan_completed,
            names.host_signals: codec.host_signal,
        }[topic]

    async def _wake_hosts(self, due: HostsDue, topic: str, partition: int, offset: int) -> None:
        """Each host as if it had its own HostDue; one host's failure parks only that host.

        The claims go to the dispatcher as one batch once every host is woken."""
        holds_scanner = self.schedule_stage.holds_scanner
        async with self.gathering():
            for host_id in due.host_ids:
                signal = HostDue(host_id=host_id, wake_at=due.wake_at)
                origin = (topic, partition, offset, host_id.encode(), partial(codec.encode, signal))
                await self.guard.handled(
                    origin, self._fold(host_id, partition, signal, holds_scanner)
                )

    async def _fold(
        self,
        host_id: str,
        partition: int,
        message: Any,
        holds_scanner: Callable[[str, str], bool],
    ) -> Decision:
        """Fold one message into the host's schedule: read it, decide, apply the decision."""
        stored = table_value(self.hosts, host_id)
        schedule = HostSchedule.model_validate_json(stored) if stored else None
        decision = decide(
            schedule,
            message,
            now=self.clock.now(),
            config=self._control.config,
            scanner_busy=holds_scanner(host_id, ADAPTIVE_SCANNER),
        )
        await self._apply(host_id, partition, schedule, decision)
        return decision

    async def _apply(
        self, host_id: str, partition: int, before: HostSchedule | None, decision: Decision
    ) -> None:
        if decision.ignored:
            self._counters[f"ignored_{decision.ignored}"] += 1
        after = decision.schedule
        if decision.changed:
            # Checked before any write: a send the broker refuses would crash Faust's producer.
            encoded = stored_schedule(after) if after else b""
            if len(encoded) > DERIVED_RECORD_MAX_BYTES:
                raise DerivedRecordTooLarge(
                    f"host {host_id!r} state would be {len(encoded)} bytes,"
                    f" over the {DERIVED_RECORD_MAX_BYTES}-byte limit for derived records"
                )
            # The changelog record is also what the projector reads (`streams.projection`):
            # a deletion's tombstone has no value, so headers say when, and which incarnation
            # it ends.
            direct = self._direct
            if after is None:
                said = [(codec.DELETED_AT_HEADER, codec.instant(self.clock.now()))]
                if before is not None:
                    said.append((codec.CREATED_AT_HEADER, codec.instant(before.created_at)))
                await direct.put_queued(self.hosts, host_id, None, partition, tuple(said))
                self.hosts_by_partition.discard(host_id)
            else:
                await direct.put_queued(self.hosts, host_id, encoded, partition)
                if before is None:  # a host read from the table is in the index already
                    self.hosts_by_partition.add(host_id)
        for message in (*decision.dispatch, *decision.releases, *decision.withdrawals):
            await self.dispatch(message)
        if decision.held_busy:
            # Woken when the schedule's command ends (`wake_host`); the recheck covers an end
            # this worker does not see, such as one handled before a rebalance.
            self._counters["adaptive_held_busy"] += 1
            self._metrics.held_busy.inc()
            self.due_index.set(host_id, self.clock.now() + BUSY_RECHECK)
        else:
            self.due_index.set(host_id, wake_at(after, self._control.config) if after else None)

    async def dispatch(self, message: DispatchRequested | SlotReleased | ClaimWithdrawn) -> None:
        """Hand a request or a release to the dispatcher; the schedule stage's way there too."""
        if self._gathered is not None:
            self._gathered.append(message)
        else:
            await self._dispatcher.request(message)

    @contextlib.asynccontextmanager
    async def gathering(self) -> AsyncIterator[None]:
        """Requests made inside go to the dispatcher together, in order, when it ends.

        Also when it ends by an error: the requests of the claims already stored go out, as
        they would have one by one. Inside another gathering, the outer one sends them."""
        if self._gathered is not None:
            yield
            return
        self._gathered = gathered = []
        try:
            yield
        finally:
            self._gathered = None
            if gathered:
                await self._dispatcher.request_all(gathered)

    def hand_over(self) -> None:
        """End the consumer's slice after the record in hand, so Faust's agents (the
        dispatcher) get the records fetched meanwhile before the next input is handled."""
        self._handing_over = True

    def handed_over(self) -> bool:
        """Whether a slice was to end (see `hand_over`); asking resets it."""
        asked, self._handing_over = self._handing_over, False
        return asked

    async def send_gathered(self) -> None:
        """Send the requests gathered so far, before the gathering ends; later ones go with it."""
        gathered = self._gathered
        if gathered:
            batch = list(gathered)
            gathered.clear()
            await self._dispatcher.request_all(batch)

    async def signal(self, key: bytes | None, value: bytes, partition: int | None = None) -> None:
        """A record on kairos-host-signals, sent directly: the schedule stage's signals take
        this one path, so two of them for the same schedule keep their order."""
        await self._direct.send(self.names.host_signals, key, value, partition)

    def wake_host(self, host_id: str) -> None:
        """Look at the host at the next tick: what held its claim back has ended."""
        if host_id in self.due_index:
            self.due_index.set(host_id, self.clock.now())

    async def signal_due(self, now: datetime) -> None:
        """The tick: one HostsDue signal per partition for the hosts due by `now`."""
        due = (host_id for host_id, _ in self.due_index.pop_due(now))
        partitions = self.settings.partitions
        for partition, host_ids in by_partition(due, partitions, HOSTS_PER_DUE_SIGNAL):
            signal = HostsDue(host_ids=host_ids, wake_at=now)
            await self.host_signals.send(key=None, value=codec.encode(signal), partition=partition)

    def rebuild(self) -> Any:
        """The table's recovery callback: the due index again from the hosts recovered."""

        async def rebuild() -> None:
            self.due_index.clear()
            self.hosts_by_partition.rebuild(self.hosts.keys())
            config = self._control.config
            async with self.gathering():
                for host_id, stored in list(self.hosts.items()):
                    try:
                        schedule = HostSchedule.model_validate_json(stored)
                    except Exception as error:  # Faust would swallow it and stop the rebuild.
                        await self.guard.unreadable_state(self.hosts, host_id, stored, error)
                        continue
                    self.due_index.set(host_id, wake_at(schedule, config))
                    request = unissued_claim(schedule, config)
                    if request is not None:
                        await self.dispatch(request)
                    withdrawal = withdrawal_pending(schedule)
                    if withdrawal is not None:
                        await self.dispatch(withdrawal)
            log.info("due index rebuilt: %d hosts", len(self.due_index))

        return rebuild()


def stored_schedule(schedule: HostSchedule) -> bytes:
    """A schedule as the `hosts` table and its changelog keep it, in memory on its worker.

    The contract's JSON under its short keys (`schemas.state.STATE_FORMAT`) and without the
    values its defaults give back: a new host's record goes from ~920 to ~310 bytes, read
    back by `HostSchedule.model_validate_json` as before. The format is written always: left
    out as a default, a record could not tell which format wrote it once the format changes.
    """
    # `attributes` is dumped by itself: left in, pydantic builds its default (a model) and
    # compares the two field by field in Python for every record: 17–23 µs per host against
    # 12 µs for the two dumps apart (offline). They are the producers' attributes, under the
    # contract's names.
    values = schedule.model_dump_json(
        by_alias=True, exclude_none=True, exclude_defaults=True, exclude={"format", "attributes"}
    ).encode()
    attributes = schedule.attributes.model_dump_json(exclude_none=True, exclude_defaults=True)
    if attributes == "{}":
        return b'{"f":%d,%s' % (STATE_FORMAT, values[1:])
    return b'{"f":%d,%s,"at":%s}' % (STATE_FORMAT, values[1:-1], attributes.encode())


def _host_id_of(parsed: Any) -> str:
    if isinstance(parsed, ObjectEvent):
        return parsed.object_id
    return str(getattr(parsed, "host_id", ""))
