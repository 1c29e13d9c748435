"""The dispatcher's outbox: issued commands, each sent once the slot its pass wrote is durable."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from kairos.floor.settings import Settings
from schemas.commands import ScanCommand
from streams import codec
from streams.direct import DirectSends
from streams.partition_index import partition_of


class Outbox:
    """Commands waiting to be sent, each with the ack of its slot's batch (None: durable)."""

    def __init__(self, settings: Settings, direct: DirectSends) -> None:
        self._settings = settings
        self._direct = direct
        self.pending: list[tuple[ScanCommand, asyncio.Future[Any] | None]] = []
        self._ready = asyncio.Event()

    def add(self, commands: Iterable[ScanCommand], slots_acked: asyncio.Future[Any] | None) -> None:
        """Commands to send once `slots_acked` is done (None: their slots are durable already)."""
        before = len(self.pending)
        self.pending.extend((command, slots_acked) for command in commands)
        if len(self.pending) > before:
            self._ready.set()

    async def send_issued_commands(self) -> None:
        """Send issued commands only once their slots are durable in the changelog.

        Table writes and command sends go to different partitions, so Kafka alone does not
        order them: a command sent before its slot was acknowledged could be out after a
        kill -9 while the next dispatcher does not count it, and the fleet-wide cap would be
        exceeded. So each command waits for the ack of the table batch its pass wrote its slot
        in (commands re-sent after recovery have theirs already), never for a flush of
        everything queued. A slot the broker refuses fails this task and with it the worker:
        its command is never sent, and the host stage asks for the host again when it recovers
        (its claim was never marked issued).
        """
        settings = self._settings
        names = settings.topics
        partitions = settings.partitions
        while True:
            await self._ready.wait()
            self._ready.clear()
            batch, self.pending = self.pending, []
            await asyncio.gather(*(acked for _, acked in batch if acked is not None))
            if settings.fault_command_send_delay_seconds:
                await asyncio.sleep(settings.fault_command_send_delay_seconds)
            # Hosts are not told: the command carries its issue time and deadline to the
            # scanners, and a host learns it ended from its result or timeout. The commands
            # go as one record batch per partition (only this task sends to the topic), on the
            # partition the default partitioner would pick for the host (its count is checked
            # at start): a send each cost more than the command's encoding.
            async with self._direct.batching():
                for command, _ in batch:
                    host_id = command.host_id
                    await self._direct.queue(
                        names.scan_commands,
                        host_id.encode(),
                        codec.encode(command),
                        partition_of(host_id, partitions),
                    )
