"""A record the broker refuses stops the worker before the input that produced it is committed.

The worker's hot paths hand records straight to the producer and read the broker's answers
only before a commit. Here the broker refuses every record of the hosts table's changelog
(the topic's `max.message.bytes` is set below the record's size), as it would refuse one after
the producer's retries were spent. The worker must stop with one clear line instead of committing
the object-created record past it: committed, that input would never be handled again.
"""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from kairos.floor.settings import Settings
from tests.support.agents import ScannerFleet
from tests.support.factories import host_created
from tests.support.kafka import hosts_changelog, publish, start_producer, wait_until
from tests.support.stack import WorkerProcess

pytestmark = pytest.mark.integration

REFUSED_LINE = "was refused"
# The broker's own default for a topic's max.message.bytes, restored after each refusal.
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = "1048588"


async def set_max_message_bytes(settings: Settings, topic: str, value: str) -> None:
    admin = AIOKafkaAdminClient(**settings.kafka_client_options())
    await admin.start()
    try:
        resource = ConfigResource(
            ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": value}
        )
        await admin.alter_configs([resource])
    finally:
        await admin.close()


async def wait_for_refusal_stop(worker: WorkerProcess, topic: str) -> None:
    """Wait until `worker` stops on a record `topic` refused: non-zero, with one clear line
    that names the topic."""
    await wait_until(
        lambda: worker.process.poll() is not None,
        timeout=60,
        what=f"the worker to stop once {topic} refused a record",
    )
    assert worker.process.returncode != 0, "a supervisor must see the worker failed"
    log = worker.log()
    assert REFUSED_LINE in log, log[-4000:]
    assert topic in log, "the line names the topic that refused it"


async def committed_offset(settings: Settings, partition: TopicPartition) -> int | None:
    consumer = AIOKafkaConsumer(
        **settings.kafka_client_options(),
        group_id=f"{settings.topic_prefix}{settings.app_id}",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        committed: int | None = await consumer.committed(partition)
        return committed
    finally:
        await consumer.stop()


async def test_a_refused_record_stops_the_worker_before_its_input_is_committed(
    settings: Settings, workers, broker_kind: str
) -> None:
    if broker_kind == "tansu":
        pytest.skip("tansu (the dev fallback) keeps no per-topic max.message.bytes to refuse by")
    names = settings.topics
    producer = await start_producer(settings)
    worker = workers(settings)
    try:
        async with ScannerFleet(settings) as fleet:
            await publish(producer, names.object_created, "accepted", host_created("accepted"))
            await wait_until(lambda: fleet.commands, timeout=30, what="the first host's scan")

        await set_max_message_bytes(settings, hosts_changelog(settings), "64")
        sent = await producer.send_and_wait(
            names.object_created,
            host_created("refused").model_dump_json().encode(),
            key=b"refused",
        )
        await wait_for_refusal_stop(worker, hosts_changelog(settings))

        partition = TopicPartition(sent.topic, sent.partition)
        committed = await committed_offset(settings, partition)
        assert committed is None or committed <= sent.offset, (
            f"committed {committed} past the refused host's input at {sent.offset}"
        )
    finally:
        await set_max_message_bytes(
            settings, hosts_changelog(settings), KAFKA_DEFAULT_MAX_MESSAGE_BYTES
        )
        await producer.stop()
