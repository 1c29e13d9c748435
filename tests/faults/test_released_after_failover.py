"""A late duplicate request for a command that already ended is absorbed after a failover too.

The dispatcher remembers the commands it released (answered or timed out) in its table, not only
in memory: a worker that takes the dispatch partition over after a kill -9 absorbs a late request
for such a command instead of issuing it again, where it would hold a slot until its deadline
(the agent, which dedupes on command_id, never answers it twice).
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from kairos.floor.settings import Settings
from schemas.internal import DispatchRequested
from tests.faults.conftest import FaultFigures
from tests.support.agents import ScannerFleet
from tests.support.factories import host_created
from tests.support.kafka import publish, start_producer, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("apache_only")]


async def test_late_request_for_a_released_command_is_absorbed_after_a_kill(
    settings: Settings, workers, fault_figures: FaultFigures
) -> None:
    names = settings.topics
    first = workers(settings)
    producer = await start_producer(settings)
    try:
        async with ScannerFleet(settings) as fleet:
            await publish(producer, names.object_created, "answered", host_created("answered"))
            await wait_until(lambda: fleet.answered, timeout=60, what="the first scan's answer")
            command = fleet.commands[0]
            await asyncio.sleep(3.0)  # The result reaches the dispatcher and releases the slot.
            first.kill()
            workers(settings)
            late = DispatchRequested(
                command_id=command["command_id"],
                host_id=command["host_id"],
                priority=command["priority"],
                due_at=datetime.fromisoformat(command["due_at"]),
                reason=command["reason"],
                state=command["state"],
                attempt=command["attempt"],
            )
            await publish(producer, names.dispatch_queue, "dispatch", late)
            await publish(producer, names.object_created, "after", host_created("after"))
            await wait_until(
                lambda: fleet.commands_for("after"), timeout=60, what="a later host's command"
            )
            await asyncio.sleep(2.0)
            again = [c for c in fleet.commands if c["command_id"] == command["command_id"]]
            fault_figures.sent = 1
            fault_figures.came_out = len(again)
            fault_figures.second_command_ids = 0
            fault_figures.extra["late request issued again"] = len(again) - 1
        assert len(again) == 1, "the released command must not be issued a second time"
    finally:
        await producer.stop()
