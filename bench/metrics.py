"""Figures from observations: percentiles, per-second counts, RSS sampled over time."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.stack import cpu_seconds, rss_bytes


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in 0..100)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def distribution(values: Sequence[float]) -> dict[str, float]:
    """count, min, p50, p90, p99, p99.9, max and mean of `values`."""
    ordered = sorted(values)
    if not ordered:
        return {"count": 0}
    return {
        "count": len(ordered),
        "min": ordered[0],
        "p50": percentile(ordered, 50),
        "p90": percentile(ordered, 90),
        "p99": percentile(ordered, 99),
        "p99_9": percentile(ordered, 99.9),
        "max": ordered[-1],
        "mean": sum(ordered) / len(ordered),
    }


def per_second(instants: Sequence[float], origin: float | None = None) -> dict[str, list[float]]:
    """Counts of events per wall second: {"t": seconds since origin, "count": [...]}."""
    if not instants:
        return {"t": [], "count": []}
    start = origin if origin is not None else min(instants)
    buckets: dict[int, int] = {}
    for instant in instants:
        second = math.floor(instant - start)
        buckets[second] = buckets.get(second, 0) + 1
    first, last = min(buckets), max(buckets)
    seconds = list(range(first, last + 1))
    return {"t": [float(s) for s in seconds], "count": [float(buckets.get(s, 0)) for s in seconds]}


def sustained_rate(instants: Sequence[float], trim: float = 0.05) -> dict[str, float]:
    """Events/s between the `trim` and 1-`trim` quantiles of the instants (ramp-up/down cut)."""
    ordered = sorted(instants)
    if len(ordered) < 20:
        return {"events": len(ordered), "seconds": math.nan, "rate": math.nan}
    low = ordered[int(len(ordered) * trim)]
    high = ordered[int(len(ordered) * (1 - trim)) - 1]
    events = int(len(ordered) * (1 - 2 * trim))
    seconds = max(high - low, 1e-6)
    return {"events": events, "seconds": seconds, "rate": events / seconds}


@dataclass
class ProcessSampler:
    """Samples RSS and CPU of processes every `interval` seconds in the background."""

    pids: Callable[[], dict[str, int]]
    interval: float = 0.5
    shared_cpu: Callable[[], dict[str, float | None]] | None = None
    """CPU seconds of what the sampled system shares with others (`BenchStack.shared_cpu_seconds`),
    kept as `<name>_cpu` beside the system's own processes."""
    samples: list[dict[str, Any]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ProcessSampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    def sample_now(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"at": time.time()}
        for name, pid in self.pids().items():
            entry[f"{name}_rss"] = rss_bytes(pid)
            entry[f"{name}_cpu"] = cpu_seconds(pid)
        if self.shared_cpu is not None:
            for name, seconds in self.shared_cpu().items():
                entry[f"{name}_cpu"] = seconds
        self.samples.append(entry)
        return entry

    async def _run(self) -> None:
        while True:
            self.sample_now()
            await asyncio.sleep(self.interval)

    def series(self, key: str, origin: float) -> dict[str, list[float]]:
        points = [(s["at"] - origin, s[key]) for s in self.samples if s.get(key) is not None]
        return {"t": [p[0] for p in points], "value": [float(p[1]) for p in points]}

    def peak(self, key: str) -> float | None:
        values = [s[key] for s in self.samples if s.get(key) is not None]
        return float(max(values)) if values else None

    def cpu_share(self, name: str, start: float, end: float) -> float | None:
        """CPU seconds the process used per wall second between two instants (1.0 = a core)."""
        key = f"{name}_cpu"
        inside = [s for s in self.samples if start <= s["at"] <= end and s.get(key) is not None]
        if len(inside) < 2:
            return None
        first, last = inside[0], inside[-1]
        wall = last["at"] - first["at"]
        return (last[key] - first[key]) / wall if wall > 0 else None
