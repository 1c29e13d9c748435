"""Steady load for fault tests, and the verifier that reads what came out.

Hosts are critical (every scan scores 0), so each is due again every `interval_minutes` of
scheduler time; with the clock sped up that is a due instance every second or two per host.
New hosts keep arriving while the faults happen: each object-created the broker acknowledged
(acks=all) must end in a command, whatever was killed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from kairos.floor.settings import Settings
from schemas.topics import CONFIG_KEY
from tests.faults.conftest import FaultFigures
from tests.support.agents import ScannerFleet
from tests.support.factories import config_updated, host_created

TEN_MINUTES_PER_SECOND = 600.0


async def configure(producer: AIOKafkaProducer, settings: Settings, *, cap: int) -> None:
    """Critical hosts every 15 scheduler minutes (1.5 s here); deadlines of an hour."""
    await producer.send_and_wait(
        settings.topics.schedule_changes,
        config_updated(max_concurrent_scans=cap, interval_critical=15, scan_timeout_seconds=3600)
        .model_dump_json()
        .encode(),
        key=CONFIG_KEY.encode(),
    )


class Onboarding:
    """Publishes a new host every `every_seconds`; remembers which the broker acknowledged."""

    def __init__(self, producer: AIOKafkaProducer, settings: Settings, *, every_seconds: float):
        self.producer = producer
        self.topic = settings.topics.object_created
        self.every_seconds = every_seconds
        self.acknowledged: list[str] = []
        self.refused = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Onboarding:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        number = 0
        while True:
            host = f"arrived-{number:04d}"
            number += 1
            try:
                await asyncio.wait_for(
                    self.producer.send_and_wait(
                        self.topic, host_created(host).model_dump_json().encode(), key=host.encode()
                    ),
                    timeout=30,
                )
            except (KafkaError, TimeoutError):
                self.refused += 1  # Not acknowledged: the broker owes nothing for it.
            else:
                self.acknowledged.append(host)
            await asyncio.sleep(self.every_seconds)


def second_command_ids(commands: list[dict[str, Any]]) -> int:
    """Due instances (host, due time, attempt) that came out under more than one command id."""
    ids: dict[tuple[str, str, int], set[str]] = defaultdict(set)
    for command in commands:
        ids[(command["host_id"], command["due_at"], command["attempt"])].add(command["command_id"])
    return sum(len(found) - 1 for found in ids.values())


def record(
    figures: FaultFigures, fleet: ScannerFleet, expected_hosts: set[str], *, cap: int
) -> None:
    commanded = {command["host_id"] for command in fleet.commands}
    figures.sent = len(expected_hosts)
    figures.came_out = len(commanded & expected_hosts)
    figures.lost = len(expected_hosts - commanded)
    figures.second_command_ids = second_command_ids(fleet.commands)
    figures.max_in_flight = fleet.max_in_flight
    figures.cap = cap
    figures.extra["commands"] = len(fleet.commands)
