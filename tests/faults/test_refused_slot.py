"""A command whose slot the broker refuses is never sent, and is issued once the worker is back.

The dispatcher writes an issued command's slot to its table, and sends the command only once
the broker has acknowledged that slot (`Dispatcher.send_issued_commands`): a command out with no
durable slot would not count against the cap after a failover. Here the broker refuses the
dispatcher table's changelog records (its `max.message.bytes` is set below a slot's size), as
it would refuse one after the producer's retries were spent. The worker must stop with one
clear line and no command for the host; the worker started next must issue it, once, since the
pass that failed committed nothing.
"""

from __future__ import annotations

import asyncio

import pytest

from kairos.floor.settings import Settings
from streams.topology import DISPATCHER
from tests.faults.test_refused_send import (
    KAFKA_DEFAULT_MAX_MESSAGE_BYTES,
    set_max_message_bytes,
    wait_for_refusal_stop,
)
from tests.support.agents import ScannerFleet
from tests.support.factories import host_created
from tests.support.kafka import publish, start_producer, wait_until

pytestmark = pytest.mark.integration

SETTLE_SECONDS = 3.0
"""Long enough for a command handed to the producer to reach the fleet (it lingers 5 ms)."""


async def test_a_command_whose_slot_is_refused_is_not_sent_and_is_issued_after_restart(
    settings: Settings, workers, broker_kind: str
) -> None:
    if broker_kind == "tansu":
        pytest.skip("tansu (the dev fallback) keeps no per-topic max.message.bytes to refuse by")
    names = settings.topics
    slots = DISPATCHER.changelog(settings)
    producer = await start_producer(settings)
    worker = workers(settings)
    try:
        async with ScannerFleet(settings, answer=lambda command: False) as fleet:
            await publish(producer, names.object_created, "accepted", host_created("accepted"))
            await wait_until(lambda: fleet.commands, timeout=30, what="the first host's command")

            await set_max_message_bytes(settings, slots, "64")
            await publish(producer, names.object_created, "refused", host_created("refused"))
            await wait_for_refusal_stop(worker, slots)
            await asyncio.sleep(SETTLE_SECONDS)
            assert fleet.commands_for("refused") == [], "a command left without a durable slot"

            await set_max_message_bytes(settings, slots, KAFKA_DEFAULT_MAX_MESSAGE_BYTES)
            workers(settings)
            await wait_until(
                lambda: fleet.commands_for("refused"),
                timeout=60,
                what="the refused host's command from the worker started next",
            )
            await asyncio.sleep(SETTLE_SECONDS)
            sent = fleet.commands_for("refused")
            assert len(sent) == 1, f"issued more than once: {sent}"
    finally:
        await set_max_message_bytes(settings, slots, KAFKA_DEFAULT_MAX_MESSAGE_BYTES)
        await producer.stop()
