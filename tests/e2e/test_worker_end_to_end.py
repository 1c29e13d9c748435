"""The worker as operators run it (`kairos worker`), through a real broker."""

from __future__ import annotations

import pytest

from kairos.floor.settings import Settings
from tests.support.factories import host_created
from tests.support.kafka import Collector, publish, start_producer

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


async def test_new_host_gets_a_scan_command_within_five_seconds(
    settings: Settings, workers
) -> None:
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    try:
        async with Collector(settings, names.scan_commands) as collected:
            await publish(producer, names.object_created, "web-1", host_created("web-1"))
            took = await collected.wait_for(
                lambda: len(collected.values(names.scan_commands)) >= 1,
                timeout=5,
                what="a scan command for web-1",
            )
    finally:
        await producer.stop()
    [command] = collected.values(names.scan_commands)
    assert command["host_id"] == "web-1"
    assert command["reason"] == "unknown"
    assert command["priority"] == 10
    assert took < 5


async def test_bad_bytes_on_every_input_topic_become_dead_letters_and_work_goes_on(
    settings: Settings, workers
) -> None:
    workers(settings)
    names = settings.topics
    inputs = [names.object_created, names.schedule_changes, names.scan_completed]
    producer = await start_producer(settings)
    try:
        async with Collector(settings, names.scan_commands, names.dead_letters) as collected:
            for number, topic in enumerate(inputs):
                await publish(producer, topic, f"bad-{number}", b"\xff this is not json {")
            await publish(producer, names.object_created, "db-1", host_created("db-1"))
            await publish(producer, names.object_created, "db-2", b'{"object_type": "host"}')
            await collected.wait_for(
                lambda: (
                    len(collected.values(names.dead_letters)) >= 4
                    and len(collected.values(names.scan_commands)) >= 1
                ),
                timeout=15,
                what="four dead letters and one command",
            )
    finally:
        await producer.stop()
    letters = collected.values(names.dead_letters)
    assert sorted(letter["source_topic"] for letter in letters) == sorted(
        [*inputs, names.object_created]
    )
    not_json = [letter for letter in letters if letter["key"].startswith("bad-")]
    assert len(not_json) == 3
    assert all("not valid JSON" in letter["error"] for letter in not_json)
    [invalid] = [letter for letter in letters if letter["key"] == "db-2"]
    assert "schema validation failed" in invalid["error"]
    assert "event_id" in invalid["error"]
    assert [c["host_id"] for c in collected.values(names.scan_commands)] == ["db-1"]
