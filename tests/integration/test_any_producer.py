"""Producers on any partitioner: two workers apply every result, each host's state in one place.

Objects are published with kcat or confluent-kafka (librdkafka: CRC32 `consistent_random` by
default, so most keys land off their murmur2 partition) while the agents answer with aiokafka,
and the other way round. Run on Apache Kafka (see `broker_kind`), with twelve partitions.
"""

from __future__ import annotations

import asyncio
import shutil
import zlib
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from kairos.floor.settings import Settings
from streams.partition_index import partition_of
from tests.support.agents import ScannerFleet, always
from tests.support.factories import host_created
from tests.support.kafka import (
    Collector,
    configure,
    hosts_changelog,
    start_producer,
    wait_until,
)

pytestmark = pytest.mark.integration

HOSTS = [f"any-{number:02d}" for number in range(24)]
PARTITIONS = 12


@pytest.fixture
def two_worker_settings(make_settings: Callable[..., Settings], broker_kind: str) -> Settings:
    if broker_kind == "tansu":
        pytest.skip("multi-worker rebalancing is proved on Apache Kafka; tansu stalls rejoins")
    return make_settings(partitions=PARTITIONS)


def test_most_of_the_hosts_land_elsewhere_under_crc32() -> None:
    """The test below proves something only if librdkafka's default misplaces its keys."""
    off = [h for h in HOSTS if zlib.crc32(h.encode()) % PARTITIONS != partition_of(h, PARTITIONS)]
    assert len(off) >= len(HOSTS) * 3 // 4


# --- producers -----------------------------------------------------------------------


class Sender:
    """What `ScannerFleet` asks of its producer: send, flush, stop."""

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        raise NotImplementedError

    async def flush(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError


class ConfluentSender(Sender):
    """confluent-kafka-python with librdkafka's default partitioner."""

    def __init__(self, settings: Settings) -> None:
        from confluent_kafka import Producer

        self._producer = Producer(
            {"bootstrap.servers": settings.kafka_bootstrap_servers, "linger.ms": 5}
        )

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        self._producer.produce(topic, value, key)
        self._producer.poll(0)

    async def flush(self) -> None:
        left = await asyncio.to_thread(self._producer.flush, 30)
        assert left == 0, f"{left} records not delivered"

    async def stop(self) -> None:
        await self.flush()
        del self._producer  # librdkafka's threads end with it, before the broker does.


class KcatSender(Sender):
    """`kcat -P -K:` fed one `key:value` line per record (one kcat per topic)."""

    def __init__(self, settings: Settings) -> None:
        self._bootstrap = settings.kafka_bootstrap_servers
        self._kcats: dict[str, asyncio.subprocess.Process] = {}
        self._starting = asyncio.Lock()

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        assert key is not None and b":" not in key and b"\n" not in value
        # One kcat per topic: a second one started meanwhile would be dropped, and asyncio
        # kills a child whose transport is collected, with what it had not delivered yet.
        async with self._starting:
            kcat = self._kcats.get(topic)
            if kcat is None:
                kcat = self._kcats[topic] = await asyncio.create_subprocess_exec(
                    *("kcat", "-P", "-b", self._bootstrap, "-t", topic, "-K:"),
                    stdin=asyncio.subprocess.PIPE,
                )
        assert kcat.stdin is not None
        kcat.stdin.write(key + b":" + value + b"\n")
        await kcat.stdin.drain()

    async def flush(self) -> None:
        """kcat delivers what it read and exits at the end of its input."""
        kcats, self._kcats = self._kcats, {}
        for kcat in kcats.values():
            assert kcat.stdin is not None
            kcat.stdin.close()
            assert await asyncio.wait_for(kcat.wait(), 30) == 0

    async def stop(self) -> None:
        await self.flush()


class AiokafkaSender(Sender):
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._producer: Any = None

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> None:
        if self._producer is None:
            self._producer = await start_producer(self._settings)
        await self._producer.send(topic, value, key=key)

    async def flush(self) -> None:
        if self._producer is not None:
            await self._producer.flush()

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()


SENDERS: dict[str, Callable[[Settings], Sender]] = {
    "kcat": KcatSender,
    "confluent-kafka": ConfluentSender,
    "aiokafka": AiokafkaSender,
}


class AnsweringFleet(ScannerFleet):
    """The simulated agents, answering through `sender` instead of their aiokafka producer."""

    def __init__(self, settings: Settings, sender: Sender) -> None:
        super().__init__(settings, score_for=always(100))
        self._sender = sender

    async def __aenter__(self) -> AnsweringFleet:
        await super().__aenter__()
        await self._producer.stop()
        self._producer = self._sender  # type: ignore[assignment]
        return self


async def _publish_hosts(settings: Settings, sender: Sender) -> None:
    for host in HOSTS:
        value = host_created(host).model_dump_json().encode()
        await sender.send(settings.topics.object_created, value, key=host.encode())
    await sender.stop()


# --- the test ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("objects_by", "results_by"),
    [
        ("kcat", "aiokafka"),
        ("confluent-kafka", "aiokafka"),
        ("aiokafka", "confluent-kafka"),
        ("aiokafka", "kcat"),
    ],
)
async def test_every_result_is_applied_whatever_partitioner_the_producers_use(
    two_worker_settings: Settings, workers: Callable[..., Any], objects_by: str, results_by: str
) -> None:
    if "kcat" in (objects_by, results_by) and shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (scripts/setup.sh installs it in CI)")
    if "confluent-kafka" in (objects_by, results_by):
        pytest.importorskip("confluent_kafka")
    settings = two_worker_settings
    workers(settings)
    workers(settings)
    producer = await start_producer(settings)
    try:  # A slot per host: no command waits for another host's result to be applied.
        await configure(settings, producer, max_concurrent_scans=len(HOSTS))
    finally:
        await producer.stop()
    changelog_topic = hosts_changelog(settings)
    async with (
        Collector(settings, changelog_topic) as changelog,
        AnsweringFleet(settings, SENDERS[results_by](settings)) as fleet,
    ):
        await _publish_hosts(settings, SENDERS[objects_by](settings))
        await wait_until(
            lambda: all(fleet.commands_for(host) for host in HOSTS),
            timeout=60,
            what=f"a command for each of the {len(HOSTS)} hosts",
        )
        await wait_until(
            lambda: len(fleet.answered) >= len(HOSTS), timeout=10, what="every command answered"
        )
        await asyncio.sleep(0.1)  # The last answers' sends, begun once they count as answered.
        await fleet.flush()
        scan_ids = {
            command["host_id"]: f"scan-{command['command_id'][:8]}" for command in fleet.commands
        }

        def unapplied() -> list[str]:
            applied = {
                state.host_id
                for state in changelog.host_states(settings)
                if state.last_scan_id == scan_ids.get(state.host_id)
            }
            return [host for host in HOSTS if host not in applied]

        try:
            await wait_until(lambda: not unapplied(), timeout=30, what="every result applied")
        except AssertionError:
            missing = unapplied()
            pytest.fail(f"{len(missing)} of {len(HOSTS)} results never applied: {missing}")
        await asyncio.sleep(1.0)  # Time for a second command, were one to be issued.

    commands: defaultdict[str, set[str]] = defaultdict(set)
    for command in fleet.commands:
        commands[command["host_id"]].add(command["command_id"])
    twice = {host: ids for host, ids in commands.items() if len(ids) > 1}
    assert not twice, f"hosts commanded twice: {twice}"
    # A host's state lives in one place: its key's murmur2 partition of the hosts changelog.
    partitions: defaultdict[str, set[int]] = defaultdict(set)
    for record in changelog.records:
        if record.topic == changelog_topic and record.value is not None:
            host = record.key.decode().strip('"')
            partitions[host].add(record.partition)
    elsewhere = {
        host: found
        for host, found in partitions.items()
        if found != {partition_of(host, settings.partitions)}
    }
    assert not elsewhere, f"host states off their key's partition: {elsewhere}"
