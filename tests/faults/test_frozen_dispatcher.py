"""The worker that owns the dispatch partition freezes (SIGSTOP) past its session timeout.

The other worker takes the partition over and keeps dispatching; the frozen one is resumed
(SIGCONT) and must notice it lost its partitions (it rejoins and recovers; the group may give
the dispatch partition back to it) instead of dispatching on its old view. The cap
holds throughout, and no due instance gets a second command id.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import UTC, datetime

import pytest

from kairos.floor.settings import Settings
from tests.faults.conftest import FaultFigures
from tests.faults.load import TEN_MINUTES_PER_SECOND, Onboarding, configure, record
from tests.support.agents import ScannerFleet, always
from tests.support.kafka import start_producer, wait_until
from tests.support.stack import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("apache_only")]

CAP = 10
OWNED = "dispatch partition owned by this worker"
NOT_OWNED = "dispatch partition not owned by this worker"
SESSION_TIMEOUT_SECONDS = 15.0


def ownership_lines(worker: WorkerProcess) -> list[str]:
    return [line for line in worker.log().splitlines() if "dispatch partition" in line]


def last_ownership(worker: WorkerProcess) -> str | None:
    lines = ownership_lines(worker)
    if not lines:
        return None
    return OWNED if OWNED in lines[-1] else NOT_OWNED


async def test_frozen_dispatcher_owner_is_replaced_and_the_cap_holds(
    make_settings, workers, fault_figures: FaultFigures
) -> None:
    settings: Settings = make_settings(
        partitions=4, clock_speed=TEN_MINUTES_PER_SECOND, clock_origin=datetime.now(UTC)
    )
    first = workers(settings)
    producer = await start_producer(settings)
    try:
        await configure(producer, settings, cap=CAP)
        second = workers(settings)
        pair = (first, second)
        await wait_until(
            lambda: sorted(str(last_ownership(w)) for w in pair) == sorted([OWNED, NOT_OWNED]),
            timeout=150,  # A second member's first rebalance has taken over a minute here.
            what="one of the two workers owning the dispatch partition",
        )
        owner, other = pair if last_ownership(first) == OWNED else pair[::-1]
        async with ScannerFleet(settings, score_for=always(0)) as fleet:
            async with Onboarding(producer, settings, every_seconds=0.3) as onboarding:
                await asyncio.sleep(6.0)
                os.killpg(owner.process.pid, signal.SIGSTOP)
                frozen_at = time.monotonic()
                try:
                    await wait_until(
                        lambda: last_ownership(other) == OWNED,
                        timeout=SESSION_TIMEOUT_SECONDS + 45,
                        what="the other worker taking the dispatch partition over",
                    )
                    commands_at_takeover = len(fleet.commands)
                    await wait_until(
                        lambda: len(fleet.commands) > commands_at_takeover + CAP,
                        timeout=30,
                        what="dispatching under the new owner",
                    )
                finally:
                    seen_before_resume = len(ownership_lines(owner))
                    os.killpg(owner.process.pid, signal.SIGCONT)
                    frozen_for = time.monotonic() - frozen_at
                # It lost its partitions while frozen: it must rejoin and recover before it
                # acts again (the group may then hand the dispatch partition back to it).
                await wait_until(
                    lambda: len(ownership_lines(owner)) > seen_before_resume,
                    timeout=120,
                    what="the resumed worker rejoining its group with a new assignment",
                )
                await asyncio.sleep(5.0)
            acknowledged = set(onboarding.acknowledged)
            try:
                await wait_until(
                    lambda: acknowledged <= {c["host_id"] for c in fleet.commands},
                    timeout=60,
                    what="a command for every acknowledged host",
                )
            finally:
                record(fault_figures, fleet, acknowledged, cap=CAP)
                fault_figures.extra["frozen for (s)"] = round(frozen_for, 1)
        assert fault_figures.lost == 0
        assert fault_figures.second_command_ids == 0
        assert fleet.max_in_flight <= CAP
        assert owner.process.poll() is None and other.process.poll() is None
    finally:
        await producer.stop()
