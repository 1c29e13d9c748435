"""The API in front of a real `kairos worker`: writes become events, the worker decides, its
projector fills the read model, and `?wait=true` answers with the state that came of it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from kairos.floor.settings import Settings
from schemas.api import Role
from schemas.topics import CONFIG_KEY
from tests.integration.test_api import P, bearer, closed_port, prepare, running_api
from tests.support.agents import ScannerFleet, always
from tests.support.factories import config_updated, host_created, scan_result
from tests.support.kafka import publish, start_producer, wait_until
from tests.support.stack import kairos_executable, settings_env

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


async def eventually(
    client: httpx.AsyncClient,
    path: str,
    headers: dict[str, str],
    holds: Any,
    *,
    timeout: float = 20,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """GET `path` until it answers 200 with a body for which `holds(body)` is true."""
    started = time.monotonic()
    while True:
        response = await client.get(path, headers=headers, params=params)
        if response.status_code == 200 and holds(response.json()):
            return dict(response.json())
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{path}: still {response.status_code} {response.text[:500]}")
        await asyncio.sleep(0.1)


async def test_writes_with_wait_answer_the_projected_state_of_a_real_worker(
    settings: Settings, workers
) -> None:
    tokens = await prepare(settings)
    workers(settings)
    admin, guest = bearer(tokens[Role.SECURITY_ADMIN]), bearer(tokens[Role.GUEST])
    producer = await start_producer(settings)
    async with (
        ScannerFleet(settings, score_for=always(10)) as fleet,
        running_api(settings) as client,
    ):
        await publish(
            producer,
            settings.topics.object_created,
            "web-1",
            host_created("web-1", organization="acme", labels={"env": "prod"}),
        )
        host = await eventually(
            client,
            f"{P}/hosts/web-1",
            guest,
            # The result row comes from its own topic and counts only once its command is
            # projected too, so it can trail the host's row by a moment.
            lambda body: (
                body["last_scan_completed"] is not None
                and body["in_flight_command_id"] is None
                and body["latest_scan"] is not None
            ),
        )
        assert host["state"] == "critical" and host["score"] == 10
        assert host["latest_scan"]["score"] == 10 and host["organization"] == "acme"
        assert host["labels"] == {"env": "prod"}

        history = await eventually(
            client, f"{P}/hosts/web-1/history", guest, lambda body: body["count"] >= 2
        )
        kinds = {entry["kind"] for entry in history["data"]}
        assert kinds == {"scan", "command"}
        command_id = next(e["command_id"] for e in history["data"] if e["kind"] == "command")
        command = await eventually(
            client, f"{P}/commands/{command_id}", guest, lambda body: body["outcome"] is not None
        )
        assert command["outcome"] == "completed" and len(command["results"]) == 1

        # Maintenance, with wait: 200 and the new schedule, projected.
        started = time.monotonic()
        response = await client.put(
            f"{P}/hosts/web-1/maintenance",
            params={"wait": "true"},
            json={"enabled": True, "duration_hours": 2},
            headers=admin,
        )
        took_maintenance = time.monotonic() - started
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["maintenance_mode"] is True and body["state"] == "maintenance"
        assert body["version"] > host["version"] and body["maintenance_until"] is not None
        assert response.headers["kairos-event-id"]
        response = await client.put(
            f"{P}/hosts/web-1/maintenance", params={"wait": "true"}, json={"enabled": False},
            headers=admin,
        )  # fmt: skip
        assert response.status_code == 200 and response.json()["maintenance_mode"] is False
        assert response.json()["state"] == "critical"

        # Config and the switch, with wait.
        before = (await client.get(f"{P}/config", headers=guest)).json()
        started = time.monotonic()
        response = await client.put(
            f"{P}/config", params={"wait": "true"}, json={"interval_critical": 30}, headers=admin
        )
        took_config = time.monotonic() - started
        assert response.status_code == 200, response.text
        assert response.json()["interval_critical"] == 30
        assert response.json()["version"] > before["version"]
        response = await client.post(
            f"{P}/toggle", params={"enabled": "false", "wait": "true"}, headers=admin
        )
        assert response.status_code == 200 and response.json()["enabled"] is False
        status = (await client.get(f"{P}/status", headers=guest)).json()
        assert status["enabled"] is False
        response = await client.post(
            f"{P}/toggle", params={"enabled": "true", "wait": "true"}, headers=admin
        )
        assert response.status_code == 200 and response.json()["enabled"] is True

        # A forced scan reaches the scanners with the force reason.
        response = await client.post(
            f"{P}/hosts/web-1/force-scan", params={"wait": "true"}, headers=admin
        )
        assert response.status_code == 200, response.text
        deadline = time.monotonic() + 15
        while not any(c["reason"] == "force" for c in fleet.commands_for("web-1")):
            assert time.monotonic() < deadline, "no forced command reached the scanners"
            await asyncio.sleep(0.05)

        status = await eventually(
            client,
            f"{P}/status",
            guest,
            lambda body: body["hosts_total"] == 1 and body["in_flight"] == 0,
        )
        assert status["by_state"]["critical"] == 1
        assert status["projection_lag_seconds"] is not None
        found = (await client.get(f"{P}/hosts", params={"label": "env=prod"}, headers=guest)).json()
        assert [h["host_id"] for h in found["data"]] == ["web-1"]

        # What the worker could not accept shows as a dead letter.
        await publish(producer, settings.topics.object_created, "bad-1", b"not json")
        letters = await eventually(
            client, f"{P}/dead-letters", admin, lambda body: body["count"] >= 1
        )
        assert letters["data"][0]["key"] == "bad-1"
    await producer.stop()
    print(f"wait=true latency: maintenance {took_maintenance:.2f}s, config {took_config:.2f}s")  # noqa: T201


async def test_kairos_api_serves_over_http_and_stops_cleanly(settings: Settings) -> None:
    """`kairos api` as operators start it: a real uvicorn process on a real port."""
    tokens = await prepare(settings)
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
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
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
            assert (await client.get("/readyz")).json()["status"] == "ready"
            status = await client.get(f"{P}/status", headers=bearer(tokens[Role.GUEST]))
            assert status.status_code == 200 and status.json()["hosts_total"] == 0
            receipt = await client.post(
                f"{P}/initialize", headers=bearer(tokens[Role.SECURITY_ADMIN])
            )
            assert receipt.status_code == 202
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal as its exit status.
        assert process.wait(15) in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in log_path.read_text()


async def test_imported_hosts_are_all_scanned_with_first_scans_spread(
    make_settings, workers
) -> None:
    # One scheduler minute per wall second: a ten-minute spread window takes ten seconds.
    settings = make_settings(clock_speed=60.0, clock_origin=datetime.now(UTC))
    tokens = await prepare(settings)
    workers(settings)
    admin = bearer(tokens[Role.SECURITY_ADMIN])
    window = timedelta(minutes=10)
    producer = await start_producer(settings)
    await publish(
        producer,
        settings.topics.schedule_changes,
        CONFIG_KEY,
        config_updated(initial_spread_seconds=int(window.total_seconds())),
    )
    await producer.stop()
    hosts = [f"csv-{n:02d}" for n in range(30)]
    rows = "".join(f"{host},{host}.example.test,env=prod,true\n" for host in hosts)
    async with ScannerFleet(settings) as fleet, running_api(settings) as client:
        await eventually(
            client, f"{P}/config", admin, lambda body: body["initial_spread_seconds"] == 600
        )
        response = await client.post(
            f"{P}/hosts:import",
            content=f"id,hostname,labels,active\n{rows}".encode(),
            headers={**admin, "Content-Type": "text/csv"},
        )
        assert response.status_code == 202 and response.json()["hosts"] == len(hosts)
        await wait_until(
            lambda: {c["host_id"] for c in fleet.commands} >= set(hosts),
            timeout=30,
            what="every imported host scanned once",
        )
        host = await eventually(
            client, f"{P}/hosts/csv-00", admin, lambda body: body["labels"] == {"env": "prod"}
        )
    assert host["hostname"] == "csv-00.example.test"
    firsts: dict[str, datetime] = {}
    for command in fleet.commands:
        firsts.setdefault(command["host_id"], datetime.fromisoformat(command["due_at"]))
    earliest, latest = min(firsts.values()), max(firsts.values())
    assert latest - earliest > window / 2, "first scans were not spread"
    assert latest - earliest <= window + timedelta(minutes=2)


async def test_result_for_a_command_never_issued_is_unmatched_never_a_success(
    settings: Settings, workers
) -> None:
    tokens = await prepare(settings)
    workers(settings)
    guest = bearer(tokens[Role.GUEST])
    producer = await start_producer(settings)
    async with (
        ScannerFleet(settings, score_for=always(10)) as fleet,
        running_api(settings) as client,
    ):
        await publish(producer, settings.topics.object_created, "um-1", host_created("um-1"))
        scanned = await eventually(
            client,
            f"{P}/hosts/um-1",
            guest,
            # Its result matched too, so the stray below is the only unmatched one.
            lambda body: (
                body["last_scan_completed"] is not None and body["latest_scan"] is not None
            ),
        )
        assert scanned["state"] == "critical"
        stray = scan_result(
            {"command_id": "never-issued-1", "host_id": "um-1"}, score=100, succeeded=True
        )
        await publish(producer, settings.topics.scan_completed, "um-1", stray)
        status = await eventually(
            client, f"{P}/status", guest, lambda body: body["unmatched_results"] == 1
        )
        history = await eventually(
            client,
            f"{P}/hosts/um-1/history",
            guest,
            lambda body: any(e.get("command_id") == "never-issued-1" for e in body["data"]),
        )
        host = (await client.get(f"{P}/hosts/um-1", headers=guest)).json()
    await producer.stop()
    [entry] = [e for e in history["data"] if e.get("command_id") == "never-issued-1"]
    assert entry["kind"] == "scan" and entry["status"] == "unmatched"
    assert entry["matched"] is False and entry["reported_status"] == "succeeded"
    matched = [e for e in history["data"] if e["kind"] == "scan" and e is not entry]
    assert matched and all(e["status"] == "succeeded" and e["matched"] for e in matched)
    assert host["state"] == "critical" and host["score"] == 10
    assert host["latest_scan"]["command_id"] == fleet.commands[0]["command_id"]
    assert status["unmatched_results"] == 1
