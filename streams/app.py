"""The worker: one Faust app wired around the stages; nothing here decides anything.

The host stage (`streams.stages.hosts`) consumes object-created, schedule-changes,
scan-completed and kairos-host-signals, a fetch at a time (`streams.consumer`), and keeps one
schedule per host; the schedule stage (`streams.stages.schedules`) runs cron, interval, RRULE
and triggered schedules inside it; the dispatcher (`streams.stages.dispatcher`) owns the
single-partition dispatch queue and with it the fleet-wide in-flight cap;
`streams.stages.control` keeps the config the same on every worker. One timer ticks the host
stage, the schedule stage and the dispatcher, at the earliest wake-up either stage holds; with
the projector enabled, it runs here too.
Topics and tables are specified in `streams.topology` (names, partitions, compaction); the
Faust topic handles opened here use its names. Nothing is built at import time:
`create_worker(settings)` wires everything.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any

import faust

from kairos.floor.clock import Clock, clock_for_speed, wall_seconds
from kairos.floor.settings import KafkaSecurityProtocol, Settings
from streams import topology
from streams.consumer import use_worker_consumer
from streams.direct import DirectSends
from streams.due_index import seconds_to_next_tick
from streams.faults import delay_offset_fetches
from streams.guard import Guard
from streams.liveness import Watchdog
from streams.metrics import WorkerMetrics, consumer_lag, serve
from streams.producer import make_idempotent
from streams.projection.runner import Projector
from streams.recovery import OrderedTableManager
from streams.stages.control import Control
from streams.stages.dispatcher import Dispatcher
from streams.stages.hosts import HostStage, input_topics
from streams.stages.schedules import ScheduleStage

log = logging.getLogger(__name__)

TICK_GAP_SECONDS = 0.05
"""The shortest wall time between two ticks: the hosts falling due meanwhile go out as one
batch of `HostsDue` signals (at 1,000 due/s, about 20 hosts over the partitions)."""


def _release() -> str:
    """This release's version, as installed; `unknown` when run from a tree not installed."""
    try:
        return package_version("kairos-scheduler")
    except PackageNotFoundError:
        return "unknown"


class Worker:
    """One worker process: the Faust app, its topics and tables, and the stages wired to them."""

    def __init__(self, settings: Settings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock = clock or clock_for_speed(
            settings.clock_speed, settings.clock_origin, settings.clock_start
        )
        self.counters: Counter[str] = Counter()
        self.metrics = WorkerMetrics()
        delay_offset_fetches(settings.fault_offset_fetch_delay_seconds)
        self.app = self._build_app()

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
            # one-record batches into many-record ones.
            producer_linger=settings.producer_linger_ms / 1000.0,
            consumer_auto_offset_reset="earliest",
            broker_session_timeout=15.0,
            broker_heartbeat_interval=3.0,
            broker_commit_interval=1.0,
            table_standby_replicas=0,
            consumer_group_instance_id=settings.group_instance_id,
            # GET /workers shows each member's release from its client id.
            broker_client_id=f"kairos-worker-{_release()}",
            # A poll's records, their messages and decoded events are built at once; bounding
            # the fetch bounds that peak, which pymalloc keeps as the process' size afterwards.
            # A smaller fetch trades a little CPU per result (more fetches) for that memory.
            consumer_max_fetch_size=settings.consumer_fetch_bytes,
            TableManager=OrderedTableManager,
            **self._faust_security(),
        )
        if settings.kafka_idempotence:
            make_idempotent(app)
        raw = {"key_serializer": "raw", "value_serializer": "raw"}
        names = settings.topics
        host_inputs = app.topic(*input_topics(names), **raw)
        host_signals = app.topic(names.host_signals, **raw)
        dispatch_topic = app.topic(names.dispatch_queue, partitions=1, **raw)
        dead_letters = app.topic(names.dead_letters, **raw)
        control_topic = app.topic(names.scheduler_control, partitions=1, **raw)
        # value_type=bytes makes Faust keep values raw in memory and in the changelog;
        # a Schema would not reach the changelog, and recovery would hand back dicts.
        hosts = topology.HOSTS.declare(app, settings)
        dispatcher_table = topology.DISPATCHER.declare(app, settings)

        direct = DirectSends(app)
        guard = Guard(dead_letters, self.clock, self.metrics, self.counters)
        self.control = Control(settings, control_topic, host_signals, hosts, guard)
        self.dispatcher = Dispatcher(
            app=app,
            settings=settings,
            clock=self.clock,
            control=self.control,
            table=dispatcher_table,
            topic=dispatch_topic,
            direct=direct,
            guard=guard,
            metrics=self.metrics,
            counters=self.counters,
        )
        self.host_stage = HostStage(
            settings=settings,
            clock=self.clock,
            control=self.control,
            dispatcher=self.dispatcher,
            hosts=hosts,
            host_signals=host_signals,
            direct=direct,
            guard=guard,
            metrics=self.metrics,
            counters=self.counters,
        )
        self.schedule_stage = ScheduleStage(self.host_stage, app, direct)
        self.host_stage.schedule_stage = self.schedule_stage
        use_worker_consumer(app, batch_inputs=self.host_stage, direct_sends=direct)
        hosts.on_recover(self.host_stage.rebuild)
        dispatcher_table.on_recover(self.dispatcher.rebuild)

        app.agent(host_inputs, name="host-stage", concurrency=1)(self.host_stage.agent)
        app.agent(dispatch_topic, name="dispatcher", concurrency=1)(self.dispatcher.agent)
        app.task(self._run_timer)
        app.task(self.control.follow)
        app.task(self.dispatcher.send_issued_commands)
        self.watchdog = Watchdog(app, settings.workdir)
        app.task(self.watchdog.run)
        if settings.metrics_port:
            app.task(self._serve_metrics)
        app.on_rebalance_complete.connect(self.dispatcher.log_ownership)
        if settings.projector_enabled:
            self.projector = Projector(settings, self.clock)
            app.task(self.projector.run)
        return app

    async def _run_timer(self) -> None:
        """The tick, when the earliest wake-up this worker holds falls due.

        A tick every `tick_seconds` alone left a due host waiting half of it on average before
        it was even signalled, which added to every command's lateness. Waking at
        the heap head, no sooner than `TICK_GAP_SECONDS` after the last tick, keeps the ticks
        a batch each when thousands fall due every second.
        """
        app = self.app
        while not app.should_stop:
            await self._tick()
            await app.sleep(self._until_next_tick())

    def _until_next_tick(self) -> float:
        clock = self.clock
        return seconds_to_next_tick(
            clock.now(),
            (self.host_stage.due_index.next_wake(), self.schedule_stage.due_index.next_wake()),
            shortest=TICK_GAP_SECONDS,
            longest=self.settings.tick_seconds,
            to_wall=lambda scheduler_seconds: wall_seconds(clock, scheduler_seconds),
        )

    async def _tick(self) -> None:
        if not self.control.ready.is_set():
            return
        now = self.clock.now()
        await self.host_stage.signal_due(now)
        if self.control.config.enabled:
            # Off, schedules stay due in their index: once on, the occurrences that came due
            # meanwhile are missed ones, and each schedule's catch-up policy decides.
            await self.schedule_stage.tick(now)
        await self.dispatcher.wake_if_needed(now)

    async def _serve_metrics(self) -> None:
        metrics = self.metrics
        dispatcher = self.dispatcher
        queue = lambda: dispatcher.queue  # noqa: E731 - the queue is replaced on recovery.
        owned = dispatcher.owned
        metrics.gauge(
            "kairos_in_flight",
            "Commands in flight (on the worker that owns the dispatch partition; 0 elsewhere).",
            lambda: queue().in_flight_count if owned() else 0,
        )
        metrics.gauge(
            "kairos_in_flight_cap",
            "max_concurrent_scans.",
            lambda: self.control.config.max_concurrent_scans,
        )
        metrics.gauge(
            "kairos_waiting_commands",
            "Claimed commands waiting for a slot (dispatch partition owner only).",
            lambda: queue().waiting_count if owned() else 0,
        )
        metrics.labelled_gauge(
            "kairos_scanner_in_flight",
            "Commands in flight per scanner pool (dispatch partition owner only).",
            ("scanner",),
            lambda: (
                {
                    (spec.name,): queue().in_flight_for_scanner(spec.name)
                    for spec in self.control.config.registry()
                }
                if owned()
                else {}
            ),
        )
        metrics.labelled_gauge(
            "kairos_scanner_waiting",
            "Commands waiting per scanner (dispatch partition owner only).",
            ("scanner",),
            lambda: (
                {(name,): count for name, count in queue().waiting_by_scanner().items()}
                if owned()
                else {}
            ),
        )
        metrics.gauge(
            "kairos_held_commands",
            "Commands waiting while the scheduler is off: held, issued once it is on again"
            " (dispatch partition owner only).",
            lambda: queue().waiting_count if owned() and not self.control.config.enabled else 0,
        )
        metrics.gauge(
            "kairos_dispatcher_owned", "1 on the worker that holds the cap.", lambda: owned()
        )
        metrics.gauge(
            "kairos_due_backlog",
            "Hosts of this worker whose wake-up time has passed and that are not yet claimed.",
            lambda: self.host_stage.due_index.due_count(self.clock.now()),
        )
        metrics.gauge(
            "kairos_hosts", "Hosts in this worker's partitions.", lambda: len(self.host_stage.hosts)
        )
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


def create_worker(settings: Settings, clock: Clock | None = None) -> Worker:
    return Worker(settings, clock)


__all__ = ["Worker", "create_worker"]
