"""The Faust worker: thin agents around the pure policy.

Stage 1 (the host stage) consumes every host-keyed topic, keeps one schedule per host in the
`hosts` table and claims a host's next command when it is due. Stage 2 (the dispatcher) owns
the single-partition dispatch queue, so it alone enforces the fleet-wide in-flight cap.
Nothing here is built at import time: `create_worker(settings)` wires everything.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter, defaultdict, deque
from datetime import datetime, timedelta
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from faust.exceptions import FaustError

from kairos.clock import Clock, clock_for_speed
from kairos.settings import KafkaSecurityProtocol, Settings
from schemas.changes import ConfigUpdated, HostsInitializeRequested, SchedulerToggled
from schemas.commands import ADAPTIVE_SCANNER, Rejection, ScanCommand
from schemas.config import SchedulerConfig
from schemas.internal import (
    CommandIssued,
    CommandTimedOut,
    ConfigPublished,
    DispatcherWoken,
    DispatchRequested,
    HostDue,
    HostReplanRequested,
    HostsDue,
    InitializePublished,
    SlotReleased,
)
from schemas.objects import ObjectEvent
from schemas.results import ScanCompleted
from schemas.state import HostSchedule, HostStateChanged
from streams import codec, topology
from streams.codec import Undecodable
from streams.direct import DirectSends
from streams.due_index import DueIndex
from streams.faults import delay_offset_fetches
from streams.liveness import Watchdog
from streams.metrics import WorkerMetrics, consumer_lag, serve
from streams.partition_index import HostsByPartition, partition_of
from streams.policy.config import apply_config_change
from streams.policy.dispatch import RECENTLY_RELEASED_KEPT, DispatchQueue, command_for
from streams.policy.host import Decision, decide, wake_at
from streams.policy.schedule_commands import origin_of
from streams.producer import make_idempotent
from streams.projection.runner import Projector
from streams.recovery import OrderedTableManager, rewind_dropped_batches
from streams.schedule_stage import ScheduleStage, is_schedule_message

log = logging.getLogger(__name__)

DISPATCH_KEY = b"dispatch"
DISPATCH_PARTITION = 0
"""The dispatch queue and its table have one partition: one owner holds the fleet-wide cap."""
CONTROL_KEY = b"config"
INFRASTRUCTURE_ERRORS = (KafkaError, ConnectionError, FaustError)
"""Failures of the broker or the runtime, not of one message; never parked as poison."""
HOSTS_PER_DUE_SIGNAL = 1000
"""Keeps a HostsDue signal far below Kafka's 1 MiB message limit at any burst size."""
RELEASED_MARKER_KEPT = timedelta(minutes=30)
"""Scheduler time a released command's marker is kept: longer than any replay or re-request."""
BUSY_RECHECK = timedelta(seconds=30)
"""How often a host held back by a schedule's command of its scanner is looked at again."""
DERIVED_RECORD_MAX_BYTES = 900_000
"""Below the producer's 1,000,000-byte request limit, with room for the record's envelope."""


class DerivedRecordTooLarge(ValueError):
    """A record derived from one input would exceed Kafka's message limit; the input is parked."""


class KairosWorker:
    """One worker process: the Faust app plus the in-memory indexes it rebuilds on assignment."""

    def __init__(self, settings: Settings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock = clock or clock_for_speed(
            settings.clock_speed, settings.clock_origin, settings.clock_start
        )
        self.names = settings.topics
        self.config = SchedulerConfig()
        self._last_published_config: SchedulerConfig | None = None
        self.config_ready = asyncio.Event()
        self.due_index = DueIndex()
        self.hosts_by_partition = HostsByPartition(settings.partitions)
        self.dispatch_queue = DispatchQueue()
        self.counters: Counter[str] = Counter()
        self._dispatcher_woken_pending = False
        self._outbox: list[tuple[ScanCommand, asyncio.Future[Any] | None]] = []
        """Issued commands with the ack of their slot record (None: durable already)."""
        self._outbox_ready = asyncio.Event()
        self._released_markers: deque[tuple[datetime, str]] = deque()
        self.metrics = WorkerMetrics()
        delay_offset_fetches(settings.fault_offset_fetch_delay_seconds)
        self.app = self._build_app()
        self.direct = DirectSends(self.app)

    # --- wiring ---------------------------------------------------------------------
    def _build_app(self) -> faust.App:
        settings = self.settings
        app = faust.App(
            f"{settings.topic_prefix}{settings.app_id}",
            broker=[f"kafka://{server}" for server in settings.kafka_bootstrap_servers.split(",")],
            store="memory://",
            autodiscover=False,
            web_enabled=False,  # Never expose Faust's table-browsing endpoints.
            topic_partitions=settings.partitions,
            topic_replication_factor=settings.replication_factor,
            producer_acks=-1,
            # Sending costs per request more than per record: a few ms of linger turns
            # one-record batches into many-record ones (about 1.7x results/s measured).
            producer_linger=settings.producer_linger_ms / 1000.0,
            consumer_auto_offset_reset="earliest",
            broker_session_timeout=15.0,
            broker_heartbeat_interval=3.0,
            broker_commit_interval=1.0,
            table_standby_replicas=0,
            TableManager=OrderedTableManager,
            **self._faust_security(),
        )
        if settings.kafka_idempotence:
            make_idempotent(app)
        rewind_dropped_batches(app)
        raw = {"key_serializer": "raw", "value_serializer": "raw"}
        names = self.names
        self.host_inputs = app.topic(
            names.object_created,
            names.schedule_changes,
            names.scan_completed,
            names.host_signals,
            **raw,
        )
        self.host_signals = app.topic(names.host_signals, **raw)
        self.dispatch_topic = app.topic(names.dispatch_queue, partitions=1, **raw)
        self.scan_commands = app.topic(names.scan_commands, **raw)
        self.dead_letters = app.topic(names.dead_letters, **raw)
        self.host_state = app.topic(names.host_state, **raw)
        self.control = app.topic(names.scheduler_control, partitions=1, **raw)

        # value_type=bytes makes Faust keep values raw in memory and in the changelog;
        # a Schema would not reach the changelog, and recovery would hand back dicts.
        self.hosts = topology.HOSTS.declare(app, settings)
        self.dispatcher_table = topology.DISPATCHER.declare(app, settings)
        self.hosts.on_recover(self._rebuild_due_index)
        self.dispatcher_table.on_recover(self._rebuild_dispatch_queue)
        self.schedule_stage = ScheduleStage(self, app)

        app.agent(self.host_inputs, name="host-stage", concurrency=1)(self._host_stage)
        app.agent(self.dispatch_topic, name="dispatcher", concurrency=1)(self._dispatcher)
        app.timer(settings.tick_seconds, name="due-tick")(self._tick)
        app.task(self._follow_control)
        app.task(self._send_issued_commands)
        self.watchdog = Watchdog(app, settings.workdir)
        app.task(self.watchdog.run)
        if settings.metrics_port:
            app.task(self._serve_metrics)
        app.on_rebalance_complete.connect(self._log_dispatcher_ownership)
        if settings.projector_enabled:
            self.projector = Projector(settings, self.clock)
            app.task(self.projector.run)
        return app

    async def _serve_metrics(self) -> None:
        metrics = self.metrics
        queue = lambda: self.dispatch_queue  # noqa: E731 - the queue is replaced on recovery.
        owned = self.owns_dispatcher
        metrics.gauge(
            "kairos_in_flight",
            "Commands in flight (on the worker that owns the dispatch partition; 0 elsewhere).",
            lambda: queue().in_flight_count if owned() else 0,
        )
        metrics.gauge(
            "kairos_in_flight_cap",
            "max_concurrent_scans.",
            lambda: self.config.max_concurrent_scans,
        )
        metrics.gauge(
            "kairos_waiting_commands",
            "Claimed commands waiting for a slot (dispatch partition owner only).",
            lambda: queue().waiting_count if owned() else 0,
        )
        metrics.gauge(
            "kairos_dispatcher_owned", "1 on the worker that holds the cap.", lambda: owned()
        )
        metrics.gauge(
            "kairos_due_backlog",
            "Hosts of this worker whose wake-up time has passed and that are not yet claimed.",
            lambda: self.due_index.due_count(self.clock.now()),
        )
        metrics.gauge("kairos_hosts", "Hosts in this worker's partitions.", lambda: len(self.hosts))
        metrics.gauge(
            "kairos_unreadable_state_records_total",
            "State records skipped at recovery because they could not be read.",
            lambda: self.counters["unreadable_state_records"],
        )
        metrics.labelled_gauge(
            "kairos_consumer_lag",
            "Records not yet read, per assigned input partition.",
            ("topic", "partition"),
            lambda: consumer_lag(self.app),
        )
        if self.settings.projector_enabled:
            self.projector.register_metrics(metrics.registry)
        recovery = self.app.tables.recovery
        metrics.recovery_seconds.read = lambda: {(): recovery.last_duration_seconds}
        settings = self.settings
        runner = await serve(
            metrics.registry,
            self.watchdog.healthy,
            host=settings.metrics_host,
            port=settings.metrics_port,
        )
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    def _faust_security(self) -> dict[str, Any]:
        settings = self.settings
        protocol = settings.kafka_security_protocol
        if protocol is KafkaSecurityProtocol.PLAINTEXT:
            return {}
        ssl_context = settings.ssl_context() if "SSL" in protocol.value else None
        if "SASL" in protocol.value:
            password = settings.kafka_sasl_password
            credentials = faust.SASLCredentials(
                username=settings.kafka_sasl_username,
                password=password.get_secret_value() if password else None,
                mechanism=settings.kafka_sasl_mechanism,
                ssl_context=ssl_context,
            )
            return {"broker_credentials": credentials}
        return {"broker_credentials": faust.SSLCredentials(ssl_context)}

    # --- stage 1: hosts -----------------------------------------------------------------
    async def _host_stage(self, stream: Any) -> None:
        await self.config_ready.wait()
        async for event in stream.events():
            message = event.message
            origin = (message.topic, message.partition, message.offset, message.key, event.value)
            try:
                await self.handle_host_message(*origin)
            except INFRASTRUCTURE_ERRORS:
                raise  # The broker, not this message: Faust's supervisor restarts the agent.
            except Exception as error:
                await self._poisoned(origin, error)

    async def handle_host_message(
        self, topic: str, partition: int, offset: int, key: bytes | None, raw: bytes | None
    ) -> None:
        names = self.names
        if topic in (names.schedule_changes, names.host_signals) and is_schedule_message(raw):
            await self.schedule_stage.handle(topic, partition, offset, key, raw)
            return
        try:
            parsed = codec.decode(self._adapter_for(topic), raw)
            host_id = self._host_id_of(parsed)
        except Undecodable as error:
            await self.dead_letter(topic, partition, offset, key, raw, str(error))
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
        if isinstance(parsed, ConfigUpdated | SchedulerToggled | HostsInitializeRequested):
            await self._change_global(parsed, topic, partition, offset, key, raw)
            return
        if key is None or key.decode("utf-8", "replace") != host_id:
            reason = f"key {key!r} must equal the host id {host_id!r} (host-keyed topic)"
            if not isinstance(parsed, ObjectEvent) or parsed.object_type == "host":
                await self.dead_letter(topic, partition, offset, key, raw, reason)
                return
        stored = self.hosts.get(host_id)
        schedule = HostSchedule.model_validate_json(stored) if stored else None
        decision = decide(
            schedule,
            parsed,
            now=self.clock.now(),
            config=self.config,
            scanner_busy=stage.holds_scanner(host_id, ADAPTIVE_SCANNER),
        )
        await self._apply(host_id, partition, schedule, decision)
        if isinstance(parsed, ScanCompleted) and not decision.ignored:
            self.metrics.results_applied.inc()
        if isinstance(parsed, ObjectEvent):
            await self.schedule_stage.route_object_event(parsed)

    def _adapter_for(self, topic: str) -> Any:
        names = self.names
        return {
            names.object_created: codec.object_event,
            names.schedule_changes: codec.schedule_change,
            names.scan_completed: codec.scan_completed,
            names.host_signals: codec.host_signal,
        }[topic]

    async def _wake_hosts(self, due: HostsDue, topic: str, partition: int, offset: int) -> None:
        """Each host as if it had its own HostDue; one host's failure parks only that host."""
        holds_scanner = self.schedule_stage.holds_scanner
        for host_id in due.host_ids:
            signal = HostDue(host_id=host_id, wake_at=due.wake_at)
            try:
                stored = self.hosts.get(host_id)
                schedule = HostSchedule.model_validate_json(stored) if stored else None
                decision = decide(
                    schedule,
                    signal,
                    now=self.clock.now(),
                    config=self.config,
                    scanner_busy=holds_scanner(host_id, ADAPTIVE_SCANNER),
                )
                await self._apply(host_id, partition, schedule, decision)
            except INFRASTRUCTURE_ERRORS:
                raise
            except Exception as error:
                origin = (topic, partition, offset, host_id.encode(), codec.encode(signal))
                await self._poisoned(origin, error)

    @staticmethod
    def _host_id_of(parsed: Any) -> str:
        if isinstance(parsed, ObjectEvent):
            return parsed.object_id
        return str(getattr(parsed, "host_id", ""))

    async def _apply(
        self, host_id: str, partition: int, before: HostSchedule | None, decision: Decision
    ) -> None:
        if decision.ignored:
            self.counters[f"ignored_{decision.ignored}"] += 1
        after = decision.schedule
        if decision.changed:
            # Checked before any write: a send the broker refuses would crash Faust's producer.
            encoded = after.model_dump_json(exclude_none=True).encode() if after else b""
            if len(encoded) > DERIVED_RECORD_MAX_BYTES:
                raise DerivedRecordTooLarge(
                    f"host {host_id!r} state would be {len(encoded)} bytes,"
                    f" over the {DERIVED_RECORD_MAX_BYTES}-byte limit for derived records"
                )
            direct = self.direct
            if after is None:
                await direct.put(self.hosts, host_id, None, partition)
                self.hosts_by_partition.discard(host_id)
            else:
                await direct.put(self.hosts, host_id, encoded, partition)
                self.hosts_by_partition.add(host_id)
            if after is None or before is None or after.version != before.version:
                change = HostStateChanged(
                    host_id=host_id,
                    version=after.version if after else (before.version + 1 if before else 0),
                    schedule=after,
                    changed_at=self.clock.now(),
                )
                await self.direct.send(
                    self.names.host_state, host_id.encode(), codec.encode(change)
                )
        for message in (*decision.dispatch, *decision.releases):
            await self.direct.send(
                self.names.dispatch_queue, DISPATCH_KEY, codec.encode(message), DISPATCH_PARTITION
            )
        if decision.held_busy:
            # Woken when the schedule's command ends (`wake_host`); the recheck covers an end
            # this worker does not see, such as one handled before a rebalance.
            self.counters["adaptive_held_busy"] += 1
            self.metrics.held_busy.inc()
            self.due_index.set(host_id, self.clock.now() + BUSY_RECHECK)
        else:
            self.due_index.set(host_id, wake_at(after, self.config) if after else None)

    def wake_host(self, host_id: str) -> None:
        """Look at the host at the next tick: what held its claim back has ended."""
        if host_id in self.due_index:
            self.due_index.set(host_id, self.clock.now())

    async def _change_global(
        self,
        change: ConfigUpdated | SchedulerToggled | HostsInitializeRequested,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        raw: bytes | None,
    ) -> None:
        if isinstance(change, HostsInitializeRequested):
            published: Any = InitializePublished(
                requested_at=change.occurred_at, event_id=str(change.event_id)
            )
        else:
            base = self.config
            last = self._last_published_config
            if last is not None and last.version > base.version:
                base = last
            result = apply_config_change(base, change)
            if isinstance(result, Rejection):
                await self.dead_letter(topic, partition, offset, key, raw, result.reason)
                return
            self._last_published_config = result
            published = ConfigPublished(config=result)
        await self.control.send(key=CONTROL_KEY, value=codec.encode(published))

    def _rebuild_due_index(self) -> Any:
        async def rebuild() -> None:
            self.due_index.clear()
            self.hosts_by_partition.rebuild(self.hosts.keys())
            for host_id, stored in list(self.hosts.items()):
                try:
                    schedule = HostSchedule.model_validate_json(stored)
                except Exception as error:  # Faust would swallow it and stop the rebuild.
                    await self._unreadable_state(self.hosts, host_id, stored, error)
                    continue
                self.due_index.set(host_id, wake_at(schedule, self.config))
                if schedule.in_flight is not None and schedule.in_flight.issued_at is None:
                    # Claimed but maybe never reached the dispatcher: ask again (it dedupes).
                    await self._request_again(schedule)
            log.info("due index rebuilt: %d hosts", len(self.due_index))

        return rebuild()

    async def _unreadable_state(self, table: Any, key: Any, stored: Any, error: Exception) -> None:
        """A state record this worker cannot read: dead-letter it, count it, rebuild the rest.

        The record stays in the table (a newer worker may read it); the key is skipped here.
        """
        self.counters["unreadable_state_records"] += 1
        raw = stored if isinstance(stored, bytes) else str(stored).encode()
        topic = table.changelog_topic.get_topic_name()
        key_bytes = key.encode() if isinstance(key, str) else key
        reason = f"unreadable state record: {type(error).__name__}: {error}"[:2000]
        await self.dead_letter(topic, None, None, key_bytes, raw, reason)

    async def _request_again(self, schedule: HostSchedule) -> None:
        assert schedule.in_flight is not None
        in_flight = schedule.in_flight
        request = DispatchRequested(
            command_id=in_flight.command_id,
            host_id=schedule.host_id,
            priority=in_flight.priority,
            due_at=in_flight.due_at,
            reason=in_flight.reason,
            state=schedule.state,
            attempt=in_flight.attempt,
        )
        await self.dispatch_topic.send(key=DISPATCH_KEY, value=codec.encode(request))

    # --- stage 2: the dispatcher ----------------------------------------------------------
    async def _dispatcher(self, stream: Any) -> None:
        await self.config_ready.wait()
        async for event in stream.events():
            message = event.message
            try:
                parsed = codec.decode(codec.dispatch_message, event.value)
            except Undecodable as error:
                await self.dead_letter(
                    message.topic,
                    message.partition,
                    message.offset,
                    message.key,
                    event.value,
                    str(error),
                )
                continue
            try:
                await self.handle_dispatch_message(parsed)
            except INFRASTRUCTURE_ERRORS:
                raise
            except Exception as error:
                origin = (message.topic, message.partition, message.offset, message.key)
                await self._poisoned((*origin, event.value), error)

    async def handle_dispatch_message(self, parsed: Any) -> None:
        queue = self.dispatch_queue
        table = self.dispatcher_table
        now = self.clock.now()
        waiting: DispatchRequested | None = None
        if isinstance(parsed, DispatchRequested):
            if queue.request(parsed):
                waiting = parsed
        elif isinstance(parsed, SlotReleased):
            queue.release(parsed.command_id, parsed.outcome)
            await self._mark_released(parsed.command_id, now)
        elif isinstance(parsed, DispatcherWoken):
            self._dispatcher_woken_pending = False
        await self._forget_released_before(now - RELEASED_MARKER_KEPT)
        for expired in queue.expire(now):
            await self._mark_released(expired.command_id, now)
            self.counters["commands_timed_out"] += 1
            self.metrics.timeouts.inc()
            timed_out = CommandTimedOut(
                host_id=expired.host_id,
                command_id=expired.command_id,
                deadline=now,
            )
            await self.host_signals.send(
                key=expired.host_id.encode(), value=codec.encode(timed_out)
            )
        issued = queue.issue(
            now=now,
            cap=self.config.max_concurrent_scans,
            timeout=timedelta(seconds=self.config.scan_timeout_seconds),
            aging_minutes=self.config.priority_aging_minutes,
        )
        if waiting is not None and waiting.command_id not in {i.request.command_id for i in issued}:
            # Recorded as waiting only if it still is: an issued entry would replace it at once.
            entry = codec.dumps({"request": waiting.model_dump(mode="json")})
            await self.direct.put(table, waiting.command_id, entry, DISPATCH_PARTITION)
        for item in issued:
            command = item.command
            self.metrics.issued(
                reason=command.reason.value, due_at=command.due_at, issued_at=command.issued_at
            )
            slot = codec.dumps(
                {
                    "request": item.request.model_dump(mode="json"),
                    "issued_at": command.issued_at.isoformat(),
                    "deadline": command.deadline.isoformat(),
                }
            )
            # The command waits for the ack of its own slot, never for everything queued.
            acked = await self.direct.put(table, command.command_id, slot, DISPATCH_PARTITION)
            self._outbox.append((command, acked))
        if issued:
            self._outbox_ready.set()
        self.counters["commands_issued"] += len(issued)

    async def _mark_released(self, command_id: str, now: datetime) -> None:
        """A durable marker: after a failover a late request for this command is still absorbed
        instead of being issued again and holding a slot until its deadline."""
        marker = codec.dumps({"released_at": now.isoformat()})
        await self.direct.put(self.dispatcher_table, command_id, marker, DISPATCH_PARTITION)
        self._released_markers.append((now, command_id))

    async def _forget_released_before(self, cutoff: datetime) -> None:
        markers = self._released_markers
        table = self.dispatcher_table
        while markers and (markers[0][0] < cutoff or len(markers) > RECENTLY_RELEASED_KEPT):
            _, command_id = markers.popleft()
            stored = table.get(command_id)
            if stored is not None and b'"released_at"' in stored:
                await self.direct.put(table, command_id, None, DISPATCH_PARTITION)

    def _rebuild_dispatch_queue(self) -> Any:
        async def rebuild() -> None:
            queue = DispatchQueue()
            resend: list[ScanCommand] = []
            released: list[tuple[datetime, str]] = []
            for key, stored in list(self.dispatcher_table.items()):
                try:
                    entry = json.loads(stored)
                    if "released_at" in entry:
                        released.append((datetime.fromisoformat(entry["released_at"]), key))
                        continue
                    request = DispatchRequested.model_validate(entry["request"])
                    if "deadline" not in entry:
                        queue.request(request)
                        continue
                    deadline = datetime.fromisoformat(entry["deadline"])
                    issued_at = datetime.fromisoformat(entry.get("issued_at") or entry["deadline"])
                except Exception as error:  # Faust would swallow it and stop the rebuild.
                    await self._unreadable_state(self.dispatcher_table, key, stored, error)
                    continue
                queue.restore_in_flight(request, deadline)
                resend.append(command_for(request, issued_at=issued_at, deadline=deadline))
            released.sort()
            for _, command_id in released:
                queue.restore_released(command_id)
            self._released_markers = deque(released)
            self.dispatch_queue = queue
            if not self.owns_dispatcher():
                resend = []  # Recovery runs on every worker; the partition's owner sends.
            # A slot is durable before its command is sent, so a kill -9 in between leaves
            # commands that never went out. Send every in-flight one again with its own id:
            # agents dedupe on command_id, and this costs one record per in-flight command.
            self._outbox.extend((command, None) for command in resend)
            if resend:
                self._outbox_ready.set()
            self.counters["commands_resent_after_recovery"] += len(resend)
            log.info(
                "dispatch queue rebuilt: %d waiting, %d in flight (%d sent again), %d released",
                queue.waiting_count,
                queue.in_flight_count,
                len(resend),
                len(released),
            )

        return rebuild()

    async def _send_issued_commands(self) -> None:
        """Send issued commands only once their slots are durable in the changelog.

        Table writes and command sends go to different partitions, so Kafka alone does not
        order them: a command sent before its slot was acknowledged could be out after a
        kill -9 while the next dispatcher does not count it, and the fleet-wide cap would be
        exceeded. So each batch waits for the acks of its own slot records (commands re-sent
        after recovery have theirs already), never for a flush of everything queued.
        """
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            batch, self._outbox = self._outbox, []
            await asyncio.gather(*(acked for _, acked in batch if acked is not None))
            if self.settings.fault_command_send_delay_seconds:
                await asyncio.sleep(self.settings.fault_command_send_delay_seconds)
            names = self.names
            for command, _ in batch:
                key = command.host_id.encode()
                await self.direct.send(names.scan_commands, key, codec.encode(command))
                if command.schedule_id is not None:
                    continue  # The schedule stage's ledger tracks it; the host has no use for it.
                notice = CommandIssued(
                    host_id=command.host_id,
                    command_id=command.command_id,
                    issued_at=command.issued_at,
                    deadline=command.deadline,
                )
                await self.direct.send(names.host_signals, key, codec.encode(notice))

    async def _log_dispatcher_ownership(self, sender: Any = None, **kwargs: Any) -> None:
        """Operators (and the fault tests) read from the log which worker holds the cap."""
        log.info(
            "dispatch partition %s by this worker",
            "owned" if self.owns_dispatcher() else "not owned",
        )

    def owns_dispatcher(self) -> bool:
        actives = self.app.assignor.assigned_actives()
        return any(tp.topic == self.names.dispatch_queue for tp in actives)

    # --- time --------------------------------------------------------------------------
    async def _tick(self) -> None:
        if not self.config_ready.is_set():
            return
        now = self.clock.now()
        due_by_partition: dict[int, list[str]] = defaultdict(list)
        for host_id, _ in self.due_index.pop_due(now):
            due_by_partition[partition_of(host_id, self.settings.partitions)].append(host_id)
        for partition, host_ids in due_by_partition.items():
            for start in range(0, len(host_ids), HOSTS_PER_DUE_SIGNAL):
                signal = HostsDue(
                    host_ids=tuple(host_ids[start : start + HOSTS_PER_DUE_SIGNAL]), wake_at=now
                )
                await self.host_signals.send(
                    key=None, value=codec.encode(signal), partition=partition
                )
        await self.schedule_stage.tick(now)
        if self._dispatcher_woken_pending or not self.owns_dispatcher():
            return
        queue = self.dispatch_queue
        deadline = queue.next_deadline()
        capacity_free = (
            queue.waiting_count and queue.in_flight_count < self.config.max_concurrent_scans
        )
        if capacity_free or (deadline is not None and deadline <= now):
            self._dispatcher_woken_pending = True
            woken = DispatcherWoken(at=now)
            await self.dispatch_topic.send(key=DISPATCH_KEY, value=codec.encode(woken))

    # --- configuration ------------------------------------------------------------------
    async def _follow_control(self) -> None:
        """Read the control topic from the start; every worker sees every config change."""
        consumer = AIOKafkaConsumer(
            **self.settings.kafka_client_options(), enable_auto_commit=False, group_id=None
        )
        await consumer.start()
        try:
            partition = TopicPartition(self.names.scheduler_control, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            end = (await consumer.end_offsets([partition]))[partition]
            caught_up = end == 0
            if caught_up:
                self.config_ready.set()
            while True:
                batches = await consumer.getmany(partition, timeout_ms=500)
                for record in batches.get(partition, []):
                    await self._on_control(record.value, live=caught_up)
                position = await consumer.position(partition)
                if not caught_up and position >= end:
                    caught_up = True
                    self.config_ready.set()
                    log.info("scheduler config v%d loaded", self.config.version)
        finally:
            await consumer.stop()

    async def _on_control(self, raw: bytes | None, *, live: bool) -> None:
        try:
            message = codec.decode(codec.control_message, raw)
        except Undecodable:
            log.warning("unreadable record on the control topic skipped")
            return
        if isinstance(message, ConfigPublished):
            if message.config.version <= self.config.version:
                return
            self.config = message.config
            if live:
                await self._replan_local_hosts(initialize=False)
        elif isinstance(message, InitializePublished) and live:
            await self._replan_local_hosts(initialize=True)

    async def _replan_local_hosts(self, *, initialize: bool) -> None:
        version = self.config.version
        for host_id in list(self.hosts.keys()):
            signal = HostReplanRequested(
                host_id=host_id, config_version=version, initialize=initialize
            )
            await self.host_signals.send(key=host_id.encode(), value=codec.encode(signal))

    # --- errors -------------------------------------------------------------------------
    async def _poisoned(self, origin: tuple[Any, ...], error: Exception) -> None:
        """A well-formed message whose handling raised: park it, keep the stage running.

        Left to Faust, the exception would crash the agent, and the same message would
        crash it again after every restart.
        """
        self.counters["poisoned_messages"] += 1
        log.error("message %s[%s]@%s could not be handled", *origin[:3], exc_info=error)
        await self.dead_letter(*origin, f"handling failed: {type(error).__name__}: {error}")

    async def dead_letter(
        self,
        topic: str,
        partition: int | None,
        offset: int | None,
        key: bytes | None,
        raw: bytes | None,
        reason: str,
    ) -> None:
        self.counters["dead_letters"] += 1
        self.metrics.dead_letters.inc(1, topic)
        letter = codec.dead_letter(
            source_topic=topic,
            partition=partition,
            offset=offset,
            key=key,
            raw=raw,
            error=reason,
            received_at=self.clock.now(),
        )
        log.warning("dead letter from %s[%s]@%s: %s", topic, partition, offset, reason)
        await self.dead_letters.send(key=key, value=codec.encode(letter))


def create_worker(settings: Settings, clock: Clock | None = None) -> KairosWorker:
    return KairosWorker(settings, clock)


__all__ = ["KairosWorker", "create_worker"]
