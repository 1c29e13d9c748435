"""Three workers, five cycles of SIGKILL and restart under steady load.

Each cycle kills one worker (in turn) without warning and starts a new one in its place. A
verifier then checks what the scanners saw: every host whose creation the broker acknowledged
was scanned, every due instance came out under exactly one command id, and the cap held.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest

from kairos.floor.settings import Settings
from tests.faults.conftest import FaultFigures
from tests.faults.load import TEN_MINUTES_PER_SECOND, Onboarding, configure, record
from tests.support.agents import ScannerFleet, always
from tests.support.kafka import start_producer, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("apache_only")]

CAP = 20
WORKERS = 3
CYCLES = 5
BETWEEN_SECONDS = 5.0


async def test_five_kill_restart_cycles_lose_nothing_and_issue_nothing_twice(
    make_settings, workers, fault_figures: FaultFigures
) -> None:
    settings: Settings = make_settings(
        partitions=12, clock_speed=TEN_MINUTES_PER_SECOND, clock_origin=datetime.now(UTC)
    )
    running = [workers(settings)]
    producer = await start_producer(settings)
    try:
        await configure(producer, settings, cap=CAP)
        running += [workers(settings) for _ in range(WORKERS - 1)]
        started = time.monotonic()
        async with ScannerFleet(settings, score_for=always(0)) as fleet:
            async with Onboarding(producer, settings, every_seconds=0.2) as onboarding:
                await asyncio.sleep(BETWEEN_SECONDS)
                for cycle in range(CYCLES):
                    victim = running.pop(cycle % len(running))
                    victim.kill()
                    running.append(workers(settings, wait=False))
                    before = len(fleet.commands)
                    await wait_until(
                        lambda before=before: len(fleet.commands) > before + CAP,
                        timeout=90,
                        what=f"commands flowing after kill {cycle + 1}",
                    )
                    await asyncio.sleep(BETWEEN_SECONDS)
            acknowledged = set(onboarding.acknowledged)
            try:
                await wait_until(
                    lambda: acknowledged <= {c["host_id"] for c in fleet.commands},
                    timeout=90,
                    what="a command for every acknowledged host",
                )
            finally:
                record(fault_figures, fleet, acknowledged, cap=CAP)
                fault_figures.extra.update(
                    kills=CYCLES, workers=WORKERS, run_s=round(time.monotonic() - started)
                )
        assert fault_figures.lost == 0
        assert fault_figures.second_command_ids == 0
        assert fleet.max_in_flight <= CAP
    finally:
        await producer.stop()
