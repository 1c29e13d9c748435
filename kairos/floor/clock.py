"""Clocks: the scheduler's time. Everything below the edges takes `now` from one of these.

Scheduling decisions read time only through a `Clock`, so tests and simulations can freeze or
speed it. A few edges read the wall clock for their own bookkeeping, outside scheduler time:
the worker's liveness file (`streams.liveness`), the agent gateway's lease instants
(`api.agent_gateway`) and token expiry (`api.tokens`, whose wall clock can be passed in).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, UTC and timezone-aware."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FrozenClock:
    """A clock that only moves when told to; for tests."""

    def __init__(self, at: datetime) -> None:
        self._at = at

    def now(self) -> datetime:
        return self._at

    def advance(self, delta: timedelta) -> None:
        self._at += delta


class ScaledClock:
    """Scheduler time running `speed` times faster than wall time since `origin`.

    For demos and simulations: a 48-hour fleet run takes minutes at speed 600. Workers given
    the same origin agree on the time, because it derives from the wall clock alone. At
    the wall instant `origin` the clock shows `start` (default: `origin`), so a simulation
    can begin on a chosen day, such as the eve of a DST change.
    """

    def __init__(
        self, speed: float, origin: datetime | None = None, start: datetime | None = None
    ) -> None:
        if speed <= 0:
            raise ValueError("clock speed must be positive")
        self.speed = speed
        self.origin = origin or datetime.now(UTC)
        self.start = start or self.origin

    def now(self) -> datetime:
        elapsed = datetime.now(UTC) - self.origin
        return self.start + elapsed * self.speed

    def wall_seconds(self, scheduler_seconds: float) -> float:
        """How long to sleep in wall time for `scheduler_seconds` of scheduler time."""
        return scheduler_seconds / self.speed


def wall_seconds(clock: Clock, scheduler_seconds: float) -> float:
    """How long `scheduler_seconds` of `clock`'s time take in wall time (a sleep's length)."""
    to_wall: Callable[[float], float] | None = getattr(clock, "wall_seconds", None)
    return to_wall(scheduler_seconds) if to_wall is not None else scheduler_seconds


def clock_for_speed(
    speed: float, origin: datetime | None = None, start: datetime | None = None
) -> Clock:
    if speed == 1 and start is None:
        return SystemClock()
    return ScaledClock(speed, origin, start)
