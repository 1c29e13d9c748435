"""The rewind `RewindingConsumer` applies to a batch Faust is about to drop, on a real broker.

The race it closes (a fetch spanning the start of a recovery) is caught by the frozen-dispatcher
fault test; here the rewind itself: back to the batch's first record, unless the partition was
sought since the batch was fetched (recovery's own seek wins).
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from kairos.floor.settings import Settings
from streams.admin import ensure_topics
from streams.recovery import _rewind
from tests.support.kafka import start_producer

pytestmark = pytest.mark.integration


async def _consumer_with_a_batch(settings: Settings, tp: TopicPartition) -> tuple[Any, int, int]:
    consumer = AIOKafkaConsumer(**settings.kafka_client_options(), enable_auto_commit=False)
    await consumer.start()
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    fetched: list[Any] = []
    for _ in range(50):
        batches = await consumer.getmany(tp, timeout_ms=500)
        fetched.extend(batches.get(tp, []))
        if len(fetched) >= 10:
            break
    assert len(fetched) == 10, f"fetched {len(fetched)} of the 10 records published"
    return consumer, fetched[0].offset, fetched[-1].offset + 1


async def test_a_dropped_batch_is_rewound_to_its_first_record(settings: Settings) -> None:
    await ensure_topics(settings)
    tp = TopicPartition(settings.topics.dead_letters, 0)
    producer = await start_producer(settings)
    try:
        for n in range(10):
            await producer.send_and_wait(tp.topic, f"record {n}".encode(), partition=0)
    finally:
        await producer.stop()
    consumer, first, after = await _consumer_with_a_batch(settings, tp)
    try:
        assert await consumer.position(tp) == after

        assert await _rewind(consumer, {tp: (first, after)}) == [tp]
        assert await consumer.position(tp) == first
        again = await consumer.getmany(tp, timeout_ms=2000)
        assert [r.offset for r in again.get(tp, [])][:1] == [first]

        # Sought elsewhere since the batch was fetched: that seek stands.
        consumer.seek(tp, 5)
        assert await _rewind(consumer, {tp: (first, after)}) == []
        assert await consumer.position(tp) == 5
        # A partition no longer assigned is left alone.
        gone = TopicPartition(tp.topic, 1)
        assert await _rewind(consumer, {gone: (0, 3)}) == []
    finally:
        await consumer.stop()
