"""Shared probes: the unauthenticated endpoints' checks run at most once per interval.

`/readyz` and `/metrics` take no token, so their database (and Kafka) checks are the only work
an anonymous caller can cause. Each check runs at most once per `PROBE_INTERVAL_SECONDS`;
callers in between get the last answer, callers during a run wait for that same run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")

PROBE_INTERVAL_SECONDS = 1.0


class SharedProbe(Generic[T]):
    def __init__(
        self,
        interval: float = PROBE_INTERVAL_SECONDS,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval = interval
        self._monotonic = monotonic
        self._last: tuple[float, T] | None = None
        self._running: asyncio.Future[T] | None = None
        self.runs = 0

    async def get(self, check: Callable[[], Awaitable[T]]) -> T:
        """The last answer if younger than the interval, else the answer of one fresh run."""
        if self._last is not None and self._monotonic() - self._last[0] < self._interval:
            return self._last[1]
        if self._running is None:
            self._running = asyncio.ensure_future(self._run(check))
        # Shielded: a caller that gives up does not cancel the run the others wait for.
        return await asyncio.shield(self._running)

    async def _run(self, check: Callable[[], Awaitable[T]]) -> T:
        try:
            self.runs += 1
            value = await check()
            self._last = (self._monotonic(), value)
            return value
        finally:
            self._running = None
