"""Bookkeeping shared by everything that consumes `scan-commands` for a scanner (the agent SDK
in `kairos.agent` and the API's HTTP gateway): bounded dedupe and safe offset commits.

Pure data structures: no Kafka client, no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable


class RecentIds:
    """The last `capacity` ids seen, oldest forgotten first: dedupe in bounded memory.

    Kairos re-sends a command only shortly after the first copy (a retried send, a worker
    failover), so remembering the most recent ids is enough; a duplicate older than
    `capacity` commands ago would be run twice.
    """

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, item: str) -> bool:
        return item in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, item: str) -> bool:
        """Remember `item`; False when it was already known (a duplicate)."""
        if item in self._ids:
            self._ids.move_to_end(item)
            return False
        self._ids[item] = None
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
        return True


class OffsetTracker:
    """Which offset of each partition may be committed: everything before the oldest record
    that is still being worked on.

    `received(partition, offset)` when a record is taken, `done(partition, offset)` when it is
    finished with (answered, skipped, found expired). `committable()` gives, per partition,
    the offset to commit (the next one to read after a restart): a crash re-delivers every
    record not yet done, and nothing done is committed twice.
    """

    def __init__(self) -> None:
        self._pending: dict[Hashable, set[int]] = {}
        self._next: dict[Hashable, int] = {}
        self._committed: dict[Hashable, int] = {}

    def received(self, partition: Hashable, offset: int) -> None:
        self._pending.setdefault(partition, set()).add(offset)
        self._next[partition] = max(self._next.get(partition, 0), offset + 1)

    def done(self, partition: Hashable, offset: int) -> None:
        self._pending.get(partition, set()).discard(offset)

    def pending(self) -> int:
        return sum(len(offsets) for offsets in self._pending.values())

    def committable(self) -> dict[Hashable, int]:
        """Offsets to commit that move a partition forward since the last `committed`."""
        answer = {}
        for partition, after_last in self._next.items():
            pending = self._pending.get(partition)
            offset = min(pending) if pending else after_last
            if offset > self._committed.get(partition, -1):
                answer[partition] = offset
        return answer

    def committed(self, offsets: dict[Hashable, int]) -> None:
        for partition, offset in offsets.items():
            self._committed[partition] = max(self._committed.get(partition, -1), offset)

    def forget(self, partitions: set[Hashable]) -> None:
        """Partitions this consumer no longer owns (a rebalance took them)."""
        for partition in partitions:
            self._pending.pop(partition, None)
            self._next.pop(partition, None)
            self._committed.pop(partition, None)
