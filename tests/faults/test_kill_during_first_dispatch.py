"""A worker killed with SIGKILL as its first commands leave: the next one sends every command.

The dispatcher makes a slot durable in its changelog before it sends the command (that keeps the
cap across a kill), so a kill in between leaves slots whose commands never went out. The worker
that recovers the dispatcher must send each of them again, at once and with its own id, instead
of waiting out the scan deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

import pytest

from kairos.floor.settings import Settings
from schemas.topics import CONFIG_KEY
from tests.faults.conftest import FaultFigures
from tests.support.agents import ScannerFleet
from tests.support.factories import config_updated, host_created
from tests.support.kafka import Collector, start_producer, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("apache_only")]

HOSTS = 200
CAP = 100
COMMANDED_WITHIN_SECONDS = 20.0


async def test_commands_claimed_before_a_kill_are_sent_by_the_next_worker(
    make_settings, workers, fault_figures: FaultFigures
) -> None:
    settings: Settings = make_settings(partitions=12)
    names = settings.topics
    producer = await start_producer(settings)
    try:
        # The first worker holds its commands after their slots are durable: the kill lands in
        # that window on every run, not only on an unlucky one.
        first = workers(settings.model_copy(update={"fault_command_send_delay_seconds": 5.0}))
        # A deadline of an hour: without a re-send, a lost command would wait that long.
        await producer.send_and_wait(
            names.schedule_changes,
            config_updated(max_concurrent_scans=CAP, scan_timeout_seconds=3600)
            .model_dump_json()
            .encode(),
            key=CONFIG_KEY.encode(),
        )
        await asyncio.sleep(1.0)  # The config reaches the worker before the hosts do.
        hosts = [f"onboarded-{number:03d}" for number in range(HOSTS)]
        slots = Collector(settings, f"{names.prefix}{settings.app_id}-dispatcher-changelog")
        async with ScannerFleet(settings, delay_seconds=0.05) as fleet, slots:
            for host in hosts:
                await producer.send(
                    names.object_created,
                    host_created(host).model_dump_json().encode(),
                    key=host.encode(),
                )
            await producer.flush()
            await wait_until(
                lambda: _in_flight_slots(slots), timeout=60, what="a durable in-flight slot"
            )
            first.kill()
            seen_at_kill = len({command["host_id"] for command in fleet.commands})
            slots_at_kill = len(_in_flight_slots(slots))
            workers(settings)
            recovered = time.monotonic()

            def commanded() -> set[str]:
                return {command["host_id"] for command in fleet.commands}

            try:
                await wait_until(
                    lambda: commanded() >= set(hosts),
                    timeout=COMMANDED_WITHIN_SECONDS,
                    what=f"a command for each of the {HOSTS} hosts after recovery",
                )
            finally:
                ids: dict[str, set[str]] = defaultdict(set)
                for command in fleet.commands:
                    if command["attempt"] == 1:
                        ids[command["host_id"]].add(command["command_id"])
                fault_figures.sent = HOSTS
                fault_figures.came_out = len(commanded() & set(hosts))
                fault_figures.lost = HOSTS - fault_figures.came_out
                fault_figures.second_command_ids = sum(len(found) - 1 for found in ids.values())
                fault_figures.max_in_flight = fleet.max_in_flight
                fault_figures.cap = CAP
                fault_figures.extra = {
                    "in-flight slots at the kill": slots_at_kill,
                    "hosts commanded before the kill": seen_at_kill,
                    "all commanded after recovery in (s)": round(time.monotonic() - recovered, 1),
                }
            await asyncio.sleep(1.0)  # Late duplicates would arrive now.
        fault_figures.second_command_ids = sum(len(found) - 1 for found in ids.values())
        assert fault_figures.lost == 0
        assert fault_figures.second_command_ids == 0, "one command id per host's first scan"
        assert fleet.max_in_flight <= CAP
    finally:
        await producer.stop()


def _in_flight_slots(slots: Collector) -> set[str]:
    """Command ids whose latest dispatcher record is an issued (in-flight) slot."""
    latest: dict[bytes, bytes | None] = {}
    for record in slots.records:
        latest[record.key] = record.value
    return {key.decode() for key, value in latest.items() if value and b'"deadline"' in value}
