"""The scheduler's configuration: one record, changed only by events, the same on every worker.

`config.updated` and `scheduler.toggled` arrive on `schedule-changes` (key `config`) on one host
stage; the change is checked against the newest config and published on the single-partition
control topic, which every worker reads whole. A worker applies each version once and re-plans
the hosts it owns; `hosts.initialize_requested` goes the same way.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from kairos.floor.settings import Settings
from schemas.changes import (
    ConfigUpdated,
    HostsInitializeRequested,
    ScannerUpserted,
    SchedulerToggled,
)
from schemas.commands import Rejection
from schemas.config import SchedulerConfig
from schemas.internal import ConfigPublished, HostReplanRequested, InitializePublished
from streams import codec
from streams.codec import Undecodable
from streams.consumer import FETCH_MAX_WAIT_MS
from streams.guard import Guard, Origin
from streams.policy.config import apply_config_change

log = logging.getLogger(__name__)

CONTROL_KEY = b"config"

GlobalChange = ConfigUpdated | SchedulerToggled | ScannerUpserted | HostsInitializeRequested


class Control:
    """The config this worker schedules by, and the stage that publishes changes to it."""

    def __init__(
        self, settings: Settings, topic: Any, host_signals: Any, hosts: Any, guard: Guard
    ) -> None:
        self.settings = settings
        self.config = SchedulerConfig()
        self.ready = asyncio.Event()
        """Set once the control topic has been read to its end: stages wait for it."""
        self._topic = topic
        self._host_signals = host_signals
        self._hosts = hosts
        self._guard = guard
        self._last_published: SchedulerConfig | None = None

    async def change(self, change: GlobalChange, origin: Origin) -> None:
        """Publish a change to every worker, or dead-letter it with the rule it breaks."""
        if isinstance(change, HostsInitializeRequested):
            published: Any = InitializePublished(
                requested_at=change.occurred_at, event_id=str(change.event_id)
            )
        else:
            base = self.config
            last = self._last_published
            if last is not None and last.version > base.version:
                base = last  # Published but not read back yet: the next change builds on it.
            result = apply_config_change(base, change)
            if isinstance(result, Rejection):
                await self._guard.dead_letter(*origin, result.reason)
                return
            self._last_published = result
            published = ConfigPublished(config=result)
        await self._topic.send(key=CONTROL_KEY, value=codec.encode(published))

    async def follow(self) -> None:
        """Read the control topic from the start; every worker sees every config change."""
        consumer = AIOKafkaConsumer(
            **self.settings.kafka_client_options(),
            enable_auto_commit=False,
            group_id=None,
            # Held no longer than the worker's own fetches: hosts claimed in the meantime
            # would be claimed under the config before the change.
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        )
        await consumer.start()
        try:
            partition = TopicPartition(self.settings.topics.scheduler_control, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            end = (await consumer.end_offsets([partition]))[partition]
            caught_up = end == 0
            if caught_up:
                self.ready.set()
            while True:
                batches = await consumer.getmany(partition, timeout_ms=500)
                for record in batches.get(partition, []):
                    await self._on_control(record.value, live=caught_up)
                position = await consumer.position(partition)
                if not caught_up and position >= end:
                    caught_up = True
                    self.ready.set()
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
        for host_id in list(self._hosts.keys()):
            signal = HostReplanRequested(
                host_id=host_id, config_version=version, initialize=initialize
            )
            await self._host_signals.send(key=host_id.encode(), value=codec.encode(signal))
