"""The HTTP gateway's Kafka side: per scanner, a consumer of `scan-commands` and the leases.

For agents that cannot reach Kafka (docs/agent.md). Each scanner gets, on its first lease
request, a `CommandFeed`: an aiokafka consumer in the group `<app_id>-gateway-<scanner>`
that buffers the scanner's commands (deduplicated by `command_id`), hands each to one agent
at a time under a lease, and commits an offset only once every command before it has been
answered, has passed its deadline, or was not for this scanner.

Leases live in this process's memory. Run one gateway replica per scanner group; a second
replica joins the same consumer group and serves the partitions Kafka gives it, but a
result must then reach the replica that leased the command (a result sent to the other one
is answered 404), and a replica that restarts forgets its leases: their commands are read
again from the last committed offset and leased anew.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from api.errors import GatewayBusy, KafkaUnavailable, LeaseConflict, LeaseNotFound
from kairos.floor.clock import Clock
from kairos.floor.consuming import OffsetTracker, RecentIds
from kairos.floor.settings import Settings
from schemas.agent import CommandLeasePublic, ScanResultBody
from schemas.commands import ScanCommand

log = logging.getLogger(__name__)

MAX_SCANNERS = 32
"""Feeds (consumers) one API process runs at most; a lease for one more scanner is 503."""
MAX_BUFFERED = 1000
"""Commands a feed reads ahead of the agents; it stops reading while this many wait."""
COMMIT_INTERVAL_SECONDS = 1.0
MAX_POLL_INTERVAL_MS = 2 * 3600 * 1000
"""A full buffer stops the feed's polling until agents lease; Kafka must not expel it."""


@dataclass
class _Entry:
    command: ScanCommand
    partition: TopicPartition
    offset: int
    lease_id: str | None = None
    lease_expires: float = 0.0
    """time.monotonic() when the current lease ends."""


class CommandFeed:
    """One scanner's commands, leased to agents one at a time each."""

    def __init__(self, settings: Settings, scanner: str, clock: Clock) -> None:
        self.scanner = scanner
        self._settings = settings
        self._clock = clock
        self._consumer = AIOKafkaConsumer(
            settings.topics.scan_commands,
            **settings.kafka_client_options(),
            group_id=f"{settings.app_id}-gateway-{scanner}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
        )
        self._seen = RecentIds()
        self._reported = RecentIds()
        self._offsets = OffsetTracker()
        self._waiting: deque[_Entry] = deque()
        self._leased: dict[str, _Entry] = {}
        self._reporting: dict[str, _Entry] = {}
        self._arrived = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def start(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._consumer.start(), timeout)
        except (TimeoutError, KafkaError, OSError) as error:
            await self._consumer.stop()
            raise KafkaUnavailable(
                f"Kafka at {self._settings.kafka_bootstrap_servers} is not reachable: {error!r}"
            ) from None
        self._task = asyncio.create_task(self._run(), name=f"gateway-{self.scanner}")

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._commit()
        await self._consumer.stop()

    async def _run(self) -> None:
        try:
            await self._poll()
        except Exception:
            log.exception("the gateway's consumer for %s failed", self.scanner)
            raise

    async def _poll(self) -> None:
        last_commit = time.monotonic()
        while True:
            if len(self._waiting) >= MAX_BUFFERED:
                await asyncio.sleep(0.1)
            else:
                batch = await self._consumer.getmany(timeout_ms=200, max_records=200)
                taken = [
                    self._take(partition, record.offset, record.value)
                    for partition, records in batch.items()
                    for record in records
                ]
                if any(taken):
                    async with self._arrived:
                        self._arrived.notify_all()
            if time.monotonic() - last_commit >= COMMIT_INTERVAL_SECONDS:
                await self._commit()
                last_commit = time.monotonic()

    def _take(self, partition: TopicPartition, offset: int, value: bytes | None) -> bool:
        self._offsets.received(partition, offset)
        try:
            command = ScanCommand.model_validate_json(value or b"")
        except ValidationError:
            command = None
        if (
            command is None
            or command.scanner != self.scanner
            or not self._seen.add(command.command_id)
        ):
            self._offsets.done(partition, offset)
            return False
        self._waiting.append(_Entry(command, partition, offset))
        return True

    async def _commit(self) -> None:
        offsets = self._offsets.committable()
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
        except KafkaError as error:
            log.info("gateway offsets for %s not committed (%s)", self.scanner, error)
            return
        self._offsets.committed(offsets)

    # --- leases -------------------------------------------------------------------------

    def _next(self) -> _Entry | None:
        """The next command to lease: an expired lease first, then the oldest waiting one;
        commands past their deadline are dropped (Kairos has counted them as failed)."""
        now = time.monotonic()
        expired = [e for e in self._leased.values() if e.lease_expires <= now]
        for entry in expired:
            del self._leased[entry.command.command_id]
            self._waiting.appendleft(entry)
        scheduler_now = self._clock.now()
        while self._waiting:
            entry = self._waiting.popleft()
            if entry.command.deadline <= scheduler_now:
                self._offsets.done(entry.partition, entry.offset)
                continue
            return entry
        return None

    async def lease(
        self, *, wait_seconds: float, lease_seconds: float
    ) -> CommandLeasePublic | None:
        """The next command under a new lease, waiting up to `wait_seconds` for one."""
        give_up = time.monotonic() + wait_seconds
        while True:
            entry = self._next()
            if entry is not None:
                entry.lease_id = secrets.token_urlsafe(12)
                entry.lease_expires = time.monotonic() + lease_seconds
                self._leased[entry.command.command_id] = entry
                return CommandLeasePublic(
                    lease_id=entry.lease_id,
                    lease_expires_at=datetime.now(UTC) + timedelta(seconds=lease_seconds),
                    command=entry.command,
                )
            remaining = give_up - time.monotonic()
            if remaining <= 0:
                return None
            # Wake for new commands, and at least once a second for leases that expire.
            async with self._arrived:
                try:
                    await asyncio.wait_for(self._arrived.wait(), min(remaining, 1.0))
                except TimeoutError:
                    pass

    def claim(self, command_id: str, lease_id: str) -> ScanCommand:
        """The command a result answers, if `lease_id` holds it now, else LeaseNotFound (never
        leased here) or LeaseConflict (expired, leased again, or already reported). Follow
        with `reported` once the result is published, or `unclaim` if that failed."""
        entry = self._leased.get(command_id)
        if entry is None:
            if command_id in self._reporting:
                raise LeaseConflict(f"a result for command {command_id!r} is being reported")
            if command_id in self._reported:
                raise LeaseConflict(f"command {command_id!r} was already reported")
            if any(e.command.command_id == command_id for e in self._waiting):
                raise LeaseConflict(f"command {command_id!r} is not leased now (lease expired)")
            raise LeaseNotFound(f"command {command_id!r} is not leased by this gateway")
        if entry.lease_id != lease_id:
            raise LeaseConflict(f"command {command_id!r} is leased under another lease_id")
        if entry.lease_expires <= time.monotonic():
            raise LeaseConflict(f"the lease on command {command_id!r} has expired")
        self._reporting[command_id] = self._leased.pop(command_id)
        return entry.command

    def unclaim(self, command_id: str) -> None:
        """Publishing the result failed: the lease holds again (until it expires)."""
        entry = self._reporting.pop(command_id, None)
        if entry is not None:
            self._leased[command_id] = entry

    def reported(self, command_id: str) -> None:
        """The result for `command_id` is published: its lease and its offset are done."""
        entry = self._reporting.pop(command_id, None)
        self._reported.add(command_id)
        if entry is not None:
            self._offsets.done(entry.partition, entry.offset)


class AgentGateway:
    """The feeds of one API process, started lazily per scanner (at most MAX_SCANNERS)."""

    def __init__(self, settings: Settings, clock: Clock, *, timeout: float) -> None:
        self._settings = settings
        self._clock = clock
        self._timeout = timeout
        self._feeds: dict[str, CommandFeed] = {}
        self._by_command: RecentIds = RecentIds()
        self._scanner_of: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def feed(self, scanner: str) -> CommandFeed:
        async with self._lock:
            feed = self._feeds.get(scanner)
            if feed is not None and not feed.alive:
                # Its consumer failed (logged): start afresh from the committed offsets.
                del self._feeds[scanner]
                await asyncio.gather(feed.stop(), return_exceptions=True)
                feed = None
            if feed is None:
                if len(self._feeds) >= MAX_SCANNERS:
                    raise GatewayBusy(
                        f"this gateway already serves {MAX_SCANNERS} scanners; run another "
                        "API process for more"
                    )
                feed = CommandFeed(self._settings, scanner, self._clock)
                await feed.start(self._timeout)
                self._feeds[scanner] = feed
            return feed

    async def lease(
        self, scanner: str, *, wait_seconds: float, lease_seconds: float
    ) -> CommandLeasePublic | None:
        feed = await self.feed(scanner)
        leased = await feed.lease(wait_seconds=wait_seconds, lease_seconds=lease_seconds)
        if leased is not None:
            self._remember(leased.command.command_id, scanner)
        return leased

    def _remember(self, command_id: str, scanner: str) -> None:
        if self._by_command.add(command_id):
            self._scanner_of[command_id] = scanner
            if len(self._scanner_of) > self._by_command.capacity:
                self._scanner_of = {
                    c: s for c, s in self._scanner_of.items() if c in self._by_command
                }

    def feed_of(self, command_id: str) -> CommandFeed:
        scanner = self._scanner_of.get(command_id)
        feed = self._feeds.get(scanner) if scanner is not None else None
        if feed is None:
            raise LeaseNotFound(f"command {command_id!r} is not leased by this gateway")
        return feed

    def claim(self, command_id: str, body: ScanResultBody) -> tuple[CommandFeed, ScanCommand]:
        feed = self.feed_of(command_id)
        return feed, feed.claim(command_id, body.lease_id)

    async def close(self) -> None:
        feeds, self._feeds = list(self._feeds.values()), {}
        await asyncio.gather(*(feed.stop() for feed in feeds), return_exceptions=True)
