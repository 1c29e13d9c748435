"""The scanner-agent SDK: consume `scan-commands` for one scanner, answer on `scan-completed`.

See docs/agent.md. One `Agent` is one member of the scanner's consumer group; run several
(processes or hosts) with the same `group_id` to share the scanner's partitions.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from kairos.floor.clock import Clock, clock_for_speed, wall_seconds
from kairos.floor.consuming import OffsetTracker, RecentIds
from kairos.floor.settings import Settings
from schemas.agent import ScanReport, scan_completed
from schemas.commands import ADAPTIVE_SCANNER, ScanCommand
from schemas.results import ScanStatus

log = logging.getLogger(__name__)

Handler = Callable[[ScanCommand], Awaitable[ScanReport]]
"""Runs one scan. Raising, or running past the command's deadline, reports a failed scan."""

COMMIT_INTERVAL_SECONDS = 1.0
MAX_POLL_INTERVAL_MS = 2 * 3600 * 1000
"""The poll loop waits for a free slot before it reads on; a slot frees at the latest at a
command's deadline (scan timeouts are at most an hour), so this never expels a healthy agent."""


@dataclass
class AgentStats:
    """What an agent has done so far (for logs, tests and the simulator's summary)."""

    received: int = 0
    duplicates: int = 0
    expired: int = 0
    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0
    in_flight: int = 0
    max_in_flight: int = 0


class Agent:
    """Consumes `scan-commands` for `scanner` in the consumer group `group_id`, runs `handler`
    on each new command (at most `concurrency` at a time) and publishes its `scan-completed`.

    - Commands for other scanners are skipped; a `command_id` seen before is skipped (the
      last `dedupe_capacity` ids are remembered).
    - A command already past its deadline when it arrives is skipped: Kairos has counted it
      as failed and issued a retry.
    - A handler that raises is reported `failed` with the error; one still running at the
      command's deadline is cancelled and reported `failed` ("timed out").
    - `stop()` (or SIGINT/SIGTERM under `run_until_signalled`) stops taking commands, gives
      in-flight scans `shutdown_grace_seconds` to finish, reports the rest as failed,
      commits the offsets and closes the clients.
    - Offsets are committed only below the oldest command not yet answered, so an agent
      that crashes hands its unanswered commands to the group again (at-least-once; the
      result of a command carries the same `event_id` every time it is sent).

    Times (`completed_at`, deadlines) are read from `clock`, by default the scheduler clock
    the settings describe (`KAIROS_CLOCK_SPEED`...), so results agree with a sped-up worker.
    """

    def __init__(
        self,
        settings: Settings,
        handler: Handler,
        *,
        scanner: str = ADAPTIVE_SCANNER,
        concurrency: int = 10,
        group_id: str | None = None,
        clock: Clock | None = None,
        dedupe_capacity: int = 10_000,
        shutdown_grace_seconds: float = 10.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.settings = settings
        self.handler = handler
        self.scanner = scanner
        self.concurrency = concurrency
        self.group_id = group_id or f"{settings.app_id}-agent-{scanner}"
        self.clock = clock or clock_for_speed(
            settings.clock_speed, settings.clock_origin, settings.clock_start
        )
        self.shutdown_grace_seconds = shutdown_grace_seconds
        self.stats = AgentStats()
        self._seen = RecentIds(dedupe_capacity)
        self._offsets = OffsetTracker()
        self._slots = asyncio.Semaphore(concurrency)
        self._scans: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._runner: asyncio.Task[None] | None = None
        self.error: Exception | None = None
        """What stopped the consumer loop, if it failed rather than being stopped."""

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Join the consumer group and start answering commands in the background."""
        options = self.settings.kafka_client_options()
        self._producer = AIOKafkaProducer(
            **options, acks="all", enable_idempotence=self.settings.kafka_idempotence
        )
        self._consumer = AIOKafkaConsumer(
            self.settings.topics.scan_commands,
            **options,
            group_id=self.group_id,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
        )
        await self._producer.start()
        try:
            await self._consumer.start()
        except BaseException:
            await self._producer.stop()
            raise
        self._runner = asyncio.create_task(self._consume(), name=f"agent-{self.scanner}")

    async def stop(self) -> None:
        """Graceful shutdown; see the class docstring. Safe to call more than once."""
        self._stopping.set()
        runner, self._runner = self._runner, None
        if runner is not None:
            try:
                await runner
            except Exception as error:  # noqa: BLE001 - reported, then the agent still closes
                log.error("the agent's consumer loop failed: %r", error)
                self.error = error
        if self._scans:
            _, unfinished = await asyncio.wait(self._scans, timeout=self.shutdown_grace_seconds)
            for task in unfinished:
                task.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)
        if self._consumer is not None:
            await self._commit()
            await self._consumer.stop()
            self._consumer = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def __aenter__(self) -> Agent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def run_until_signalled(self) -> None:
        """Start, answer commands until SIGINT or SIGTERM, then stop gracefully; raises what
        stopped the consumer loop if it failed on its own (e.g. Kafka refused the group)."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._stopping.set)
        try:
            await self.start()
            assert self._runner is not None
            stopping = asyncio.ensure_future(self._stopping.wait())
            await asyncio.wait({stopping, self._runner}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            await self.stop()
        if self.error is not None:
            raise self.error

    # --- the loop -----------------------------------------------------------------------

    async def _consume(self) -> None:
        assert self._consumer is not None
        stopping = asyncio.ensure_future(self._stopping.wait())
        last_commit = asyncio.get_running_loop().time()
        try:
            while not self._stopping.is_set():
                batch = await self._consumer.getmany(timeout_ms=200, max_records=100)
                for partition, records in batch.items():
                    for record in records:
                        if self._stopping.is_set():
                            # Not taken: left uncommitted, the group hands it on.
                            self._consumer.seek(partition, record.offset)
                            break
                        await self._take(partition, record.offset, record.value, stopping)
                now = asyncio.get_running_loop().time()
                if now - last_commit >= COMMIT_INTERVAL_SECONDS:
                    await self._commit()
                    last_commit = now
        finally:
            stopping.cancel()

    async def _take(
        self,
        partition: TopicPartition,
        offset: int,
        value: bytes | None,
        stopping: asyncio.Future[Any],
    ) -> None:
        self._offsets.received(partition, offset)
        command = self._command(value)
        if command is None or command.scanner != self.scanner:
            self._offsets.done(partition, offset)
            return
        self.stats.received += 1
        if not self._seen.add(command.command_id):
            self.stats.duplicates += 1
            self._offsets.done(partition, offset)
            return
        if command.deadline <= self.clock.now():
            self.stats.expired += 1
            self._offsets.done(partition, offset)
            return
        acquired = asyncio.ensure_future(self._slots.acquire())
        await asyncio.wait({acquired, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not acquired.done():
            # Stopping with every slot busy: the command is not taken. Its offset stays
            # uncommitted, so the next member of the group reads it again.
            acquired.cancel()
            return
        task = asyncio.create_task(self._scan(command, partition, offset))
        self._scans.add(task)
        task.add_done_callback(self._scans.discard)

    def _command(self, value: bytes | None) -> ScanCommand | None:
        if value is None:
            return None
        try:
            return ScanCommand.model_validate_json(value)
        except ValidationError as error:
            log.warning("skipping a scan command that does not match the contract: %s", error)
            return None

    async def _scan(self, command: ScanCommand, partition: TopicPartition, offset: int) -> None:
        self.stats.in_flight += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            report = await self._run_handler(command)
            await self._publish(command, report)
        finally:
            self.stats.in_flight -= 1
            self._offsets.done(partition, offset)
            self._slots.release()

    async def _run_handler(self, command: ScanCommand) -> ScanReport:
        remaining = (command.deadline - self.clock.now()).total_seconds()
        try:
            report = await asyncio.wait_for(
                self.handler(command), max(0.0, wall_seconds(self.clock, remaining))
            )
        except TimeoutError:
            self.stats.timed_out += 1
            self.stats.failed += 1
            return ScanReport.failure(
                f"timed out at the command's deadline {_iso(command.deadline)}"
            )
        except asyncio.CancelledError:
            if not self._stopping.is_set():
                raise
            self.stats.failed += 1
            return ScanReport.failure("the agent shut down before the scan finished")
        except Exception as error:  # noqa: BLE001 - any handler error is the scan's failure
            log.info("scan %s failed: %r", command.command_id, error)
            self.stats.failed += 1
            text = str(error).strip()
            return ScanReport.failure(
                f"{type(error).__name__}: {text}" if text else type(error).__name__
            )
        if report.status is ScanStatus.FAILED:
            self.stats.failed += 1
        else:
            self.stats.succeeded += 1
        return report

    async def _publish(self, command: ScanCommand, report: ScanReport) -> None:
        assert self._producer is not None
        result = scan_completed(command, report, now=self.clock.now())
        await self._producer.send_and_wait(
            self.settings.topics.scan_completed,
            result.model_dump_json().encode(),
            key=command.host_id.encode(),
        )

    async def _commit(self) -> None:
        if self._consumer is None:
            return
        offsets = self._offsets.committable()
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
        except KafkaError as error:
            # A rebalance took a partition: its new owner re-reads the unanswered commands.
            log.info("offsets not committed (%s); they will be read again", error)
            return
        self._offsets.committed(offsets)


def _iso(instant: datetime) -> str:
    return instant.isoformat()
