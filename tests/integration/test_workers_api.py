"""GET /workers: the worker group as Kafka's group coordinator sees it, with two workers.

Run on Apache Kafka (see `broker_kind`): tansu makes a consumer group wait out a whole session
timeout on every membership change.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import httpx
import pytest

from kairos.floor.settings import Settings
from schemas.api import Role
from tests.integration.test_api import P, bearer, prepare, running_api
from tests.integration.test_schedules_api import kairos_api
from tests.support.factories import host_created
from tests.support.kafka import start_producer
from tests.support.stack import kairos_executable, settings_env

pytestmark = pytest.mark.integration

HOSTS = [f"seen-{number:02d}" for number in range(40)]


@pytest.fixture
def cluster_settings(make_settings, broker_kind: str) -> Settings:
    if broker_kind == "tansu":
        pytest.skip("multi-worker rebalancing is proved on Apache Kafka; tansu stalls rejoins")
    return make_settings(partitions=6)


async def settled(
    client: httpx.AsyncClient,
    headers: dict[str, str],
    holds: Any,
    *,
    timeout: float = 90,
) -> dict[str, Any]:
    """GET /workers until the answer satisfies `holds`."""
    started = time.monotonic()
    body: dict[str, Any] = {}
    while time.monotonic() - started < timeout:
        response = await client.get(f"{P}/workers", headers=headers)
        assert response.status_code == 200, response.text
        body = response.json()
        if holds(body):
            return body
        await asyncio.sleep(0.5)
    raise AssertionError(f"the worker group never settled: {body}")


def stable_with(members: int) -> Any:
    return lambda body: (
        body["state"] == "Stable" and len(body["members"]) == members and not body["unassigned"]
    )


def assigned(body: dict[str, Any]) -> Counter[tuple[str, int]]:
    return Counter(
        (partition["topic"], partition["partition"])
        for member in body["members"]
        for partition in member["partitions"]
    )


async def test_workers_lists_two_members_one_owning_the_dispatch_queue(
    cluster_settings: Settings, workers, tmp_path: Path
) -> None:
    settings = cluster_settings
    names = settings.topics
    tokens = await prepare(settings)
    guest = bearer(tokens[Role.GUEST])
    first = workers(settings)
    second = workers(settings)
    producer = await start_producer(settings)
    try:
        for host in HOSTS:
            await producer.send(
                names.object_created,
                host_created(host).model_dump_json().encode(),
                key=host.encode(),
            )
        await producer.flush()
    finally:
        await producer.stop()

    async with running_api(settings) as client:
        body = await settled(client, guest, stable_with(2))
        assert body["group_id"] == f"{settings.topic_prefix}{settings.app_id}"
        owners = [member for member in body["members"] if member["owns_dispatch"]]
        assert len(owners) == 1, body["members"]
        assert body["dispatch_owner"] == owners[0]["member_id"]
        assert {"topic": names.dispatch_queue, "partition": 0} in [
            {"topic": p["topic"], "partition": p["partition"]} for p in owners[0]["partitions"]
        ]
        # Every input partition is assigned, each to one member only.
        counted = assigned(body)
        assert counted and max(counted.values()) == 1
        for topic in (names.object_created, names.scan_completed, names.schedule_changes):
            assert {(topic, number) for number in range(settings.partitions)} <= set(counted)
        for member in body["members"]:
            assert member["client_id"] and member["client_host"]
            assert member["version"] == package_version("kairos-scheduler")
            assert member["partitions"], "a member with nothing assigned"
            assert member["lag"] == sum(p["lag"] or 0 for p in member["partitions"])

        # The hosts were read: the group's committed offsets reach the end of the topic.
        def read_all(body: dict[str, Any]) -> bool:
            rows = [
                p
                for member in body["members"]
                for p in member["partitions"]
                if p["topic"] == names.object_created
            ]
            return sum(p["end"] or 0 for p in rows) == len(HOSTS) and all(
                p["lag"] == 0 for p in rows
            )

        await settled(client, guest, read_all, timeout=60)

        # Answers are cached: a console polling every second does not ask the broker each time.
        one = (await client.get(f"{P}/workers", headers=guest)).json()
        two = (await client.get(f"{P}/workers", headers=guest)).json()
        assert one["observed_at"] == two["observed_at"]

        # `kairos workers`: the same answer, through the API.
        with kairos_api(settings, tmp_path) as url:
            env = {
                **settings_env(settings),
                "KAIROS_API_URL": url,
                "KAIROS_TOKEN": tokens[Role.GUEST],
            }
            shown = subprocess.run(
                [*kairos_executable(), "workers"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert shown.returncode == 0, shown.stderr
            assert "2 member(s); dispatch owner: " + owners[0]["member_id"] in shown.stdout
            assert shown.stdout.count(" owner\n") == 1, shown.stdout

        # One worker leaves: the other is the only member and owns everything.
        first.stop()
        body = await settled(client, guest, stable_with(1))
        (member,) = body["members"]
        assert member["owns_dispatch"] and body["dispatch_owner"] == member["member_id"]
        assert set(assigned(body)) == set(counted)
    assert second.process.poll() is None
