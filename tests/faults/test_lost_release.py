"""A scan result whose slot release never reached the dispatcher frees the slot when read again.

The host stage writes a result's new host state and the release of its command's slot in the
same pass, and the worker commits the result only once the broker has taken both. Here the
broker takes the host's state and refuses the release (the dispatch queue topic's
`max.message.bytes` is set below its record's size): the worker stops with the result
uncommitted, as it would after a crash between the two. The worker started next reads the
result again and finds it applied, a duplicate. It must release the slot again: otherwise the
slot stays taken until the command's deadline, an hour here, and under a cap of one no other
host is scanned meanwhile.
"""

from __future__ import annotations

import asyncio

import pytest

from kairos.floor.settings import Settings
from tests.faults.test_refused_send import (
    KAFKA_DEFAULT_MAX_MESSAGE_BYTES,
    set_max_message_bytes,
    wait_for_refusal_stop,
)
from tests.support.agents import ScannerFleet
from tests.support.factories import host_created
from tests.support.kafka import (
    Collector,
    configure,
    hosts_changelog,
    publish,
    start_producer,
    wait_until,
)

pytestmark = pytest.mark.integration


async def test_a_result_read_again_releases_the_slot_its_lost_release_held(
    settings: Settings, workers, broker_kind: str
) -> None:
    if broker_kind == "tansu":
        pytest.skip("tansu (the dev fallback) keeps no per-topic max.message.bytes to refuse by")
    names = settings.topics
    producer = await start_producer(settings)
    worker = workers(settings)
    answered: set[str] = set()
    try:
        await configure(settings, producer, max_concurrent_scans=1, scan_timeout_seconds=3600)
        fleet = ScannerFleet(settings, answer=lambda command: command["host_id"] in answered)
        async with fleet, Collector(settings, hosts_changelog(settings)) as changelog:
            await publish(producer, names.object_created, "first", host_created("first"))
            await wait_until(lambda: fleet.commands, timeout=30, what="the first host's command")
            await publish(producer, names.object_created, "second", host_created("second"))
            await asyncio.sleep(1.0)
            assert [c["host_id"] for c in fleet.commands] == ["first"], "a cap of one holds"

            await set_max_message_bytes(settings, names.dispatch_queue, "64")
            answered.add("first")
            fleet.answer_later(fleet.commands[0])
            await wait_for_refusal_stop(worker, names.dispatch_queue)
            # The result was applied before the stop: read again, it is a duplicate.
            await wait_until(
                lambda: any(
                    state.last_scan_completed is not None
                    for state in changelog.host_states(settings, "first")
                ),
                timeout=10,
                what="the first host's state with its result, in the changelog",
            )

            await set_max_message_bytes(
                settings, names.dispatch_queue, KAFKA_DEFAULT_MAX_MESSAGE_BYTES
            )
            workers(settings)
            await wait_until(
                lambda: any(c["host_id"] == "second" for c in fleet.commands),
                timeout=60,
                what="the second host's command, once the slot is released again",
            )
    finally:
        await set_max_message_bytes(settings, names.dispatch_queue, KAFKA_DEFAULT_MAX_MESSAGE_BYTES)
        await producer.stop()
