"""Apache Kafka killed with SIGKILL under load: nothing acknowledged is lost, scheduling goes on.

- One broker, killed and restarted on its own data directory three times while a worker runs and
  hosts come due: the worker reconnects by itself.
- Three brokers (replication 3, min.insync.replicas 2, as docker-compose deploys): one killed
  under load and brought back, twice; writes with acks=all go on throughout.
Each run checks that every host whose object-created the broker acknowledged got a command, that
no due instance got a second command id, and that the cap held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kairos.floor.settings import Settings
from kairos.localstack.apache import ApacheKafkaCluster
from tests.faults.conftest import FaultFigures
from tests.faults.load import TEN_MINUTES_PER_SECOND, Onboarding, configure, record
from tests.support.agents import ScannerFleet, always
from tests.support.kafka import start_producer, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("apache_only")]

CAP = 20
DOWN_SECONDS = 3.0
RUN_BETWEEN_SECONDS = 8.0


@pytest.fixture
def own_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ApacheKafkaCluster]:
    cluster = ApacheKafkaCluster(tmp_path / "kafka", nodes=request.param, heap="384m")
    cluster.start(timeout=120)
    try:
        yield cluster
    finally:
        cluster.stop()


async def _bounce_under_load(
    cluster: ApacheKafkaCluster,
    settings: Settings,
    workers,
    figures: FaultFigures,
    *,
    node_of_round: list[int],
) -> None:
    worker = workers(settings)
    producer = await start_producer(settings, request_timeout_ms=10_000)
    try:
        await configure(producer, settings, cap=CAP)
        async with ScannerFleet(settings, score_for=always(0)) as fleet:
            async with Onboarding(producer, settings, every_seconds=0.2) as onboarding:
                await asyncio.sleep(RUN_BETWEEN_SECONDS)
                for node in node_of_round:
                    cluster.kill_node(node)
                    await asyncio.sleep(DOWN_SECONDS)
                    cluster.start_node(node, timeout=120)
                    before = len(fleet.commands)
                    await wait_until(
                        lambda before=before: len(fleet.commands) > before + CAP,
                        timeout=60,
                        what="commands flowing again after the broker came back",
                    )
                    await asyncio.sleep(RUN_BETWEEN_SECONDS)
            acknowledged = set(onboarding.acknowledged)
            started = time.monotonic()
            try:
                await wait_until(
                    lambda: acknowledged <= {c["host_id"] for c in fleet.commands},
                    timeout=60,
                    what="a command for every acknowledged host",
                )
            finally:
                record(figures, fleet, acknowledged, cap=CAP)
                figures.extra.update(
                    bounces=len(node_of_round),
                    refused_while_down=onboarding.refused,
                    drained_in_s=round(time.monotonic() - started, 1),
                    worker_alive=worker.process.poll() is None,
                )
        assert figures.lost == 0
        assert figures.second_command_ids == 0
        assert fleet.max_in_flight <= CAP
        assert worker.process.poll() is None, "the worker reconnects by itself"
    finally:
        await producer.stop()


@pytest.mark.parametrize("own_cluster", [1], indirect=True)
async def test_single_broker_killed_three_times_loses_no_acknowledged_event(
    own_cluster: ApacheKafkaCluster, make_settings, workers, fault_figures: FaultFigures
) -> None:
    settings: Settings = make_settings(
        kafka_bootstrap_servers=own_cluster.bootstrap_servers,
        clock_speed=TEN_MINUTES_PER_SECOND,
        clock_origin=datetime.now(UTC),
    )
    await _bounce_under_load(own_cluster, settings, workers, fault_figures, node_of_round=[0, 0, 0])


@pytest.mark.parametrize("own_cluster", [3], indirect=True)
async def test_one_of_three_brokers_killed_twice_loses_no_acknowledged_event(
    own_cluster: ApacheKafkaCluster, make_settings, workers, fault_figures: FaultFigures
) -> None:
    settings: Settings = make_settings(
        kafka_bootstrap_servers=own_cluster.bootstrap_servers,
        replication_factor=3,
        min_insync_replicas=2,
        clock_speed=TEN_MINUTES_PER_SECOND,
        clock_origin=datetime.now(UTC),
    )
    await _bounce_under_load(own_cluster, settings, workers, fault_figures, node_of_round=[1, 2])
