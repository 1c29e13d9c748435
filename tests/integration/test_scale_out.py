"""Three workers on twelve partitions: one command per due instance, the cap always holds.

Run on Apache Kafka (see `broker_kind`): tansu makes a restarted consumer group wait out a
whole session timeout on every membership change, which turns these into timing tests.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from datetime import UTC, datetime

import pytest

from kairos.floor.settings import Settings
from schemas.topics import CONFIG_KEY
from tests.support.agents import ScannerFleet, always
from tests.support.factories import config_updated, host_created
from tests.support.kafka import start_producer, wait_until

pytestmark = pytest.mark.integration

FLEET = 2000
CAP = 50
CYCLES = 3
TEN_MINUTES_PER_SECOND = 600.0


@pytest.fixture
def cluster_settings(make_settings, broker_kind: str) -> Settings:
    if broker_kind == "tansu":
        pytest.skip("multi-worker rebalancing is proved on Apache Kafka; tansu stalls rejoins")
    return make_settings(
        partitions=12,
        clock_speed=TEN_MINUTES_PER_SECOND,
        clock_origin=datetime.now(UTC),
        tick_seconds=0.1,
    )


async def _onboard(settings: Settings, hosts: list[str]) -> None:
    names = settings.topics
    producer = await start_producer(settings)
    try:
        # Critical hosts every 15 scheduler minutes: 1.5 s of wall time per cycle; a deadline
        # of an hour (6 s of wall time) keeps a failover from timing out every command.
        await producer.send_and_wait(
            names.schedule_changes,
            config_updated(
                max_concurrent_scans=CAP, interval_critical=15, scan_timeout_seconds=3600
            )
            .model_dump_json()
            .encode(),
            key=CONFIG_KEY.encode(),
        )
        await asyncio.sleep(1.0)
        for host in hosts:
            await producer.send(
                names.object_created,
                host_created(host).model_dump_json().encode(),
                key=host.encode(),
            )
        await producer.flush()
    finally:
        await producer.stop()


def _assert_one_command_id_per_due_instance(commands: list[dict]) -> None:
    ids_by_instance: dict[tuple[str, str, int], set[str]] = defaultdict(set)
    instances_by_id: dict[str, set[tuple[str, str, int]]] = defaultdict(set)
    for command in commands:
        instance = (command["host_id"], command["due_at"], command["attempt"])
        ids_by_instance[instance].add(command["command_id"])
        instances_by_id[command["command_id"]].add(instance)
    split = {instance: ids for instance, ids in ids_by_instance.items() if len(ids) > 1}
    shared = {command_id: inst for command_id, inst in instances_by_id.items() if len(inst) > 1}
    assert not split, f"due instances with several command ids: {list(split.items())[:3]}"
    assert not shared, f"command ids reused across due instances: {list(shared.items())[:3]}"


async def test_three_workers_issue_one_command_per_due_instance_under_the_cap(
    cluster_settings: Settings, workers
) -> None:
    for _ in range(3):
        workers(cluster_settings)
    hosts = [f"fleet-{number:05d}" for number in range(FLEET)]
    async with ScannerFleet(cluster_settings, score_for=always(10)) as fleet:
        await _onboard(cluster_settings, hosts)
        await wait_until(
            lambda: all(len(fleet.commands_for(host)) >= CYCLES for host in hosts),
            timeout=240,
            what=f"{CYCLES} scans of each of {FLEET} hosts",
        )
    assert fleet.max_in_flight <= CAP
    assert fleet.max_in_flight > CAP // 2, "the cap was never approached: the test proves nothing"
    ids = [command["command_id"] for command in fleet.commands]
    assert len(ids) == len(set(ids)), "a command id was issued twice without a crash"
    _assert_one_command_id_per_due_instance(fleet.commands)


async def test_killed_worker_loses_no_host_and_reissues_no_instance_under_a_new_id(
    cluster_settings: Settings, workers
) -> None:
    started = [workers(cluster_settings) for _ in range(3)]
    hosts = [f"crash-{number:05d}" for number in range(FLEET)]
    async with ScannerFleet(cluster_settings, score_for=always(10)) as fleet:
        await _onboard(cluster_settings, hosts)
        await wait_until(
            lambda: len(fleet.commands) >= FLEET // 2, timeout=120, what="half the first round"
        )
        started[0].kill()
        killed_at = time.monotonic()
        await asyncio.sleep(2.0)
        workers(cluster_settings)
        seen_before_restart = len(fleet.commands)
        await wait_until(
            lambda: all(len(fleet.commands_for(host)) >= CYCLES for host in hosts),
            timeout=240,
            what=f"{CYCLES} scans of every host after a kill -9",
        )
    recovered_in = time.monotonic() - killed_at
    assert len(fleet.commands) > seen_before_restart
    assert fleet.max_in_flight <= CAP
    _assert_one_command_id_per_due_instance(fleet.commands)
    assert recovered_in < 240
