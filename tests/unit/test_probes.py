"""Shared probes: one run per interval, shared by every caller in between."""

from __future__ import annotations

import asyncio

from api.probes import SharedProbe


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_callers_share_one_run_per_interval() -> None:
    ticks = Ticks()
    probe: SharedProbe[int] = SharedProbe(1.0, monotonic=ticks)
    started = 0

    async def check() -> int:
        nonlocal started
        started += 1
        await asyncio.sleep(0.01)
        return started

    async def scenario() -> list[int]:
        concurrent = await asyncio.gather(*(probe.get(check) for _ in range(50)))
        ticks.now = 0.9
        within = await probe.get(check)
        ticks.now = 1.0
        after = await probe.get(check)
        return [*set(concurrent), within, after]

    assert asyncio.run(scenario()) == [1, 1, 2]
    assert probe.runs == 2
