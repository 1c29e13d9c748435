"""The dispatcher's durable table read back: the dispatch queue of a recovered partition, and
the released markers that keep a late request for an ended command from being issued again."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from schemas.commands import ScanCommand
from streams import codec
from streams.direct import DirectSends, table_value
from streams.guard import Guard
from streams.policy.dispatch import RECENTLY_RELEASED_KEPT, DispatchQueue, command_for

DISPATCH_PARTITION = 0
"""The dispatch queue and its table have one partition: one owner holds the fleet-wide cap."""


@dataclass
class Recovered:
    queue: DispatchQueue
    in_flight: list[ScanCommand]
    """The commands whose slots were durable: each is sent again with its own id."""
    released: list[tuple[datetime, str]]
    """The released markers, oldest first."""


async def recovered(table: Any, guard: Guard) -> Recovered:
    """The queue again from the durable slots, waiting entries and released markers."""
    queue = DispatchQueue()
    in_flight: list[ScanCommand] = []
    released: list[tuple[datetime, str]] = []
    for key, stored in list(table.items()):
        try:
            request, issued_at, deadline, released_at = codec.read_dispatch_entry(stored)
        except Exception as error:  # Faust would swallow it and stop the rebuild.
            await guard.unreadable_state(table, key, stored, error)
            continue
        if released_at is not None:
            released.append((released_at, key))
        elif request is not None and deadline is not None and issued_at is not None:
            queue.restore_in_flight(request, deadline)
            in_flight.append(command_for(request, issued_at=issued_at, deadline=deadline))
        elif request is not None:
            queue.request(request)
    released.sort()
    for _, command_id in released:
        queue.restore_released(command_id)
    return Recovered(queue, in_flight, released)


class ReleasedMarkers:
    """The dispatch table's released markers this worker wrote or recovered, oldest first."""

    def __init__(self, table: Any, direct: DirectSends) -> None:
        self._table = table
        self._direct = direct
        self._markers: deque[tuple[datetime, str]] = deque()

    def reset(self, released: list[tuple[datetime, str]]) -> None:
        self._markers = deque(released)

    async def mark(self, command_id: str, now: datetime) -> None:
        """A durable marker: after a failover a late request for this command is still absorbed
        instead of being issued again and holding a slot until its deadline."""
        marker = codec.dispatch_released(now)
        await self._direct.put_queued(self._table, command_id, marker, DISPATCH_PARTITION)
        self._markers.append((now, command_id))

    async def forget_before(self, cutoff: datetime) -> None:
        markers = self._markers
        table = self._table
        while markers and (markers[0][0] < cutoff or len(markers) > RECENTLY_RELEASED_KEPT):
            _, command_id = markers.popleft()
            stored = table_value(table, command_id)
            if stored is not None and codec.RELEASED_MARKER in stored:
                await self._direct.put_queued(table, command_id, None, DISPATCH_PARTITION)
