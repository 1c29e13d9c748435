"""The HTTP gateway for scanner agents: an agent that speaks only HTTP (no Kafka client)
leases commands from a real `kairos api` process, reports results, and a real `kairos worker`
moves the host in the read model. Plus the lease rules and the AGENT role's fence.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from kairos.floor.settings import Settings
from schemas.agent import result_event_id
from schemas.api import Role
from schemas.base import CommandReason, ComplianceState
from schemas.commands import ScanCommand
from tests.integration.test_api import P, bearer, closed_port, prepare, running_api
from tests.support.factories import host_created
from tests.support.kafka import Collector, publish, start_producer
from tests.support.stack import kairos_executable, settings_env

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.fixture(autouse=True)
def _apache_only(broker_kind: str) -> None:
    if broker_kind == "tansu":
        pytest.skip(TANSU_REASON)


TANSU_REASON = (
    "tansu admits a new consumer group slowly, past the gateway's Kafka timeout (503);"
    " the gateway is proved on Apache Kafka"
)

A = "/api/agents"


def cli_token(settings: Settings, role: str) -> str:
    """A token made as an operator makes one: `kairos token create --role ROLE`."""
    done = subprocess.run(
        [*kairos_executable(), "token", "create", "--role", role, "--name", "scanner-1"],
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"created a {role} token" in done.stderr
    return done.stdout.strip().splitlines()[-1]


@asynccontextmanager
async def kairos_api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """`kairos api` as operators start it, on a real port; a client with a long read timeout."""
    port = closed_port()
    log_path = Path(tempfile.mkdtemp()) / "api.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [*kairos_executable(), "api", "--host", "127.0.0.1", "--port", str(port)],
            env=settings_env(settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=40) as client:
            started = time.monotonic()
            while True:
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert process.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() - started < 30, log_path.read_text()[-3000:]
                await asyncio.sleep(0.2)
            yield client
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(20) in (0, -signal.SIGTERM), log_path.read_text()[-3000:]


async def http_agent(
    client: httpx.AsyncClient, token: str, scores: dict[str, float], stop: asyncio.Event
) -> list[str]:
    """A scanner agent written against the HTTP gateway alone: lease, scan, report."""
    headers = bearer(token)
    reported = []
    while not stop.is_set():
        leased = await client.post(
            f"{A}/compliance/commands:lease", params={"wait": 2}, headers=headers
        )
        if leased.status_code == 204:
            continue
        assert leased.status_code == 200, leased.text
        lease = leased.json()
        command = lease["command"]
        score = scores[command["host_id"]]
        answer = await client.post(
            f"{A}/commands/{command['command_id']}/result",
            json={
                "lease_id": lease["lease_id"],
                "status": "succeeded",
                "score": score,
                "passed": 10,
                "failed": 0 if score == 100 else 5,
                "scan_id": f"http-{command['command_id'][:8]}",
            },
            headers=headers,
        )
        assert answer.status_code == 202, answer.text
        assert answer.json()["event_id"] == str(result_event_id(command["command_id"]))
        reported.append(command["host_id"])
    return reported


async def test_an_http_only_agent_completes_scans_end_to_end(make_settings, workers) -> None:
    settings = make_settings()
    tokens = await prepare(settings)
    workers(settings)
    agent_token = cli_token(settings, "AGENT")
    guest = bearer(tokens[Role.GUEST])
    scores = {"gw-1": 10.0, "gw-2": 55.0, "gw-3": 100.0}
    expected = {"gw-1": "critical", "gw-2": "partial", "gw-3": "compliant"}
    producer = await start_producer(settings)
    stop = asyncio.Event()
    async with kairos_api(settings) as client:
        agent = asyncio.create_task(http_agent(client, agent_token, scores, stop))
        for host_id in scores:
            await publish(producer, settings.topics.object_created, host_id, host_created(host_id))
        started = time.monotonic()
        states: dict[str, Any] = {}
        while time.monotonic() - started < 60:
            assert not agent.done(), agent.exception()
            for host_id in scores:
                answer = await client.get(f"{P}/hosts/{host_id}", headers=guest)
                if answer.status_code == 200:
                    states[host_id] = answer.json()
            if all(
                states.get(h, {}).get("state") == expected[h]
                and states[h]["in_flight_command_id"] is None
                for h in scores
            ):
                break
            await asyncio.sleep(0.2)
        stop.set()
        reported = await asyncio.wait_for(agent, 10)
    await producer.stop()
    assert {h: states[h]["state"] for h in scores} == expected, states
    assert {h: states[h]["score"] for h in scores} == scores
    assert all(states[h]["last_scan_completed"] is not None for h in scores)
    assert sorted(reported) == sorted(scores)  # One scan each: nothing leased twice.


def command(command_id: str, *, deadline: datetime | None = None) -> ScanCommand:
    now = datetime.now(UTC)
    return ScanCommand(
        event_id=uuid.uuid4(),
        command_id=command_id,
        host_id=f"host-{command_id}",
        scanner="nmap",
        priority=5,
        reason=CommandReason.SCHEDULE,
        state=ComplianceState.UNKNOWN,
        due_at=now,
        issued_at=now,
        deadline=deadline or now + timedelta(hours=1),
        attempt=1,
    )


async def test_leases_are_exclusive_expire_and_refuse_stale_or_repeated_results(
    make_settings,
) -> None:
    settings = make_settings()
    tokens = await prepare(settings)
    agent = bearer(tokens[Role.AGENT])
    lease_url = f"{A}/nmap/commands:lease"
    producer = await start_producer(settings)
    names = settings.topics
    async with (
        Collector(settings, names.scan_completed) as results,
        running_api(settings) as client,
    ):
        # Long-poll: the lease answers when the command arrives, not at the end of `wait`.
        asked = time.monotonic()
        waiting = asyncio.create_task(
            client.post(lease_url, params={"wait": 30, "lease_seconds": 1}, headers=agent)
        )
        await asyncio.sleep(1.0)
        await publish(
            producer, names.scan_commands, "host-old", command("old", deadline=datetime.now(UTC))
        )
        await publish(producer, names.scan_commands, "host-c1", command("c1"))
        await publish(producer, names.scan_commands, "host-c1", command("c1"))  # Re-sent.
        first = await waiting
        assert first.status_code == 200, first.text
        assert time.monotonic() - asked < 25
        assert first.json()["command"]["command_id"] == "c1"  # "old" is past its deadline.
        first_lease = first.json()["lease_id"]

        # At most one lease per command: while it holds, nobody else gets c1 (nor its copy).
        busy = await client.post(lease_url, params={"wait": 0.5}, headers=agent)
        assert busy.status_code == 204
        await asyncio.sleep(1.2)  # The one-second lease expires...
        again = await client.post(lease_url, params={"wait": 5}, headers=agent)
        assert again.status_code == 200 and again.json()["command"]["command_id"] == "c1"
        second_lease = again.json()["lease_id"]
        assert second_lease != first_lease

        body = {"status": "succeeded", "score": 90}
        result_url = f"{A}/commands/c1/result"
        stale = await client.post(result_url, json={**body, "lease_id": first_lease}, headers=agent)
        assert stale.status_code == 409 and "another lease" in stale.json()["detail"]
        done = await client.post(result_url, json={**body, "lease_id": second_lease}, headers=agent)
        assert done.status_code == 202
        repeated = await client.post(
            result_url, json={**body, "lease_id": second_lease}, headers=agent
        )
        assert repeated.status_code == 409 and "already reported" in repeated.json()["detail"]
        unknown = await client.post(
            f"{A}/commands/never/result", json={**body, "lease_id": "x"}, headers=agent
        )
        assert unknown.status_code == 404
        invalid = await client.post(
            result_url, json={"status": "succeeded", "score": 101, "lease_id": "x"}, headers=agent
        )
        assert invalid.status_code == 422 and invalid.json()["errors"][0]["field"] == "score"

        await results.wait_for(
            lambda: len(results.values(names.scan_completed)) >= 1, timeout=10, what="result"
        )
        await asyncio.sleep(0.5)
    await producer.stop()
    (published,) = results.values(names.scan_completed)
    assert published["command_id"] == "c1" and published["scanner"] == "nmap"
    assert published["host_id"] == "host-c1" and published["score"] == 90


async def test_agent_tokens_may_only_lease_and_report(make_settings) -> None:
    settings = make_settings()
    tokens = await prepare(settings)
    async with running_api(settings) as client:
        agent = bearer(tokens[Role.AGENT])
        for method, path in (
            ("GET", f"{P}/status"),
            ("GET", f"{P}/hosts"),
            ("POST", f"{P}/hosts/h-1/force-scan"),
            ("GET", "/api/scheduled-jobs"),
        ):
            refused = await client.request(method, path, headers=agent)
            assert refused.status_code == 403, (path, refused.text)
        for role in (Role.GUEST, Role.SECURITY_ADMIN, Role.SUPER_ADMIN):
            lease = await client.post(
                f"{A}/compliance/commands:lease", params={"wait": 0}, headers=bearer(tokens[role])
            )
            assert lease.status_code == 403 and "AGENT" in lease.json()["detail"]
            report = await client.post(
                f"{A}/commands/c/result",
                json={"status": "failed", "lease_id": "x"},
                headers=bearer(tokens[role]),
            )
            assert report.status_code == 403
        allowed = await client.post(
            f"{A}/compliance/commands:lease", params={"wait": 0}, headers=agent
        )
        assert allowed.status_code == 204
