"""Which keys wake up when: a heap with lazy deletion, so a tick costs O(due), not O(keys).

The host stage keeps one for its hosts, the schedule stage one for its schedules.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from datetime import UTC, datetime


class DueIndex:
    """Wake-up times of the hosts (or schedules) this worker owns; rebuilt on table recovery.

    Times are kept as POSIX seconds: a float is half a datetime's size (24 against 48 bytes a
    key, held once by the heap and the dict), and a datetime comes back from it to the
    microsecond: rounded to the nearest, which is exact while a double's spacing there stays
    under a microsecond (until the year 2242)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, str]] = []
        self._wake_at: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._wake_at)

    def __contains__(self, host_id: object) -> bool:
        return host_id in self._wake_at

    def set(self, host_id: str, wake_at: datetime | None) -> None:
        """Schedule `host_id` to wake at `wake_at`; None removes it."""
        if wake_at is None:
            self._wake_at.pop(host_id, None)
            return
        seconds = wake_at.timestamp()
        if self._wake_at.get(host_id) == seconds:
            return
        self._wake_at[host_id] = seconds
        heapq.heappush(self._heap, (seconds, host_id))

    def pop_due(self, now: datetime, limit: int = 10_000) -> list[tuple[str, datetime]]:
        """Remove and return up to `limit` hosts whose wake-up time is at or before `now`."""
        due: list[tuple[str, datetime]] = []
        until = now.timestamp()
        while self._heap and self._heap[0][0] <= until and len(due) < limit:
            seconds, host_id = heapq.heappop(self._heap)
            if self._wake_at.get(host_id) != seconds:
                continue  # Superseded by a later set().
            del self._wake_at[host_id]
            due.append((host_id, datetime.fromtimestamp(seconds, UTC)))
        return due

    def due_count(self, now: datetime) -> int:
        """Hosts whose wake-up time is at or before `now` (O(hosts): for scrapes, not ticks)."""
        until = now.timestamp()
        return sum(1 for seconds in self._wake_at.values() if seconds <= until)

    def next_wake(self) -> datetime | None:
        while self._heap and self._wake_at.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return datetime.fromtimestamp(self._heap[0][0], UTC) if self._heap else None

    def clear(self) -> None:
        self._heap.clear()
        self._wake_at.clear()


def seconds_to_next_tick(
    now: datetime,
    wakes: Iterable[datetime | None],
    *,
    shortest: float,
    longest: float,
    to_wall: Callable[[float], float],
) -> float:
    """Wall seconds until the next tick: when the earliest of `wakes` falls due, but no sooner
    than `shortest` (a tick takes what fell due meanwhile as one batch) and no later than
    `longest`. `to_wall` turns scheduler seconds into wall seconds (a sped-up clock)."""
    known = [wake for wake in wakes if wake is not None]
    if not known:
        return longest
    ahead = to_wall((min(known) - now).total_seconds())
    return min(longest, max(shortest, ahead))
