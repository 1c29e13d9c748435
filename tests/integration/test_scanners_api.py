"""The scanner registry through the API: reads from the projected config, writes as
`scanner.upserted` on schedule-changes (key `config`), and schedules that name a scanner the
registry lacks, or holds inactive, refused with a 422 naming `scanner`."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from schemas.api import Role
from schemas.topics import CONFIG_KEY
from tests.integration.test_api import api_settings, bearer, prepare, running_api
from tests.integration.test_schedules_api import kairos_api
from tests.support.kafka import Collector
from tests.support.scanners import SCANNERS, put_scanners, register_scanners
from tests.support.stack import kairos_executable, settings_env

pytestmark = pytest.mark.integration

J = "/api/scheduled-jobs"


def job(name: str, scanner: str = "nmap") -> dict[str, Any]:
    return {
        "name": name,
        "scanner": scanner,
        "recurrence": {"kind": "cron", "expression": "0 0 1 1 *"},
    }


def field_errors(response: Any) -> list[str]:
    return [error["field"] for error in response.json().get("errors", [])]


async def test_writes_are_validated_and_published_on_the_config_key(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> None:
    settings = api_settings(bootstrap_servers, postgres_server, broker_kind)
    tokens = await prepare(settings)
    admin, guest = bearer(tokens[Role.SECURITY_ADMIN]), bearer(tokens[Role.GUEST])
    analyst = bearer(tokens[Role.SECURITY_ANALYST])
    topic = settings.topics.schedule_changes
    async with Collector(settings, topic) as changes, running_api(settings) as client:
        listed = (await client.get(SCANNERS, headers=guest)).json()
        assert [entry["name"] for entry in listed["data"]] == ["compliance"]
        assert listed["count"] == 1 and listed["data"][0]["in_flight"] == 0
        implicit = listed["data"][0]
        assert (implicit["max_concurrent"], implicit["timeout_seconds"]) == (5, 600)
        assert (await client.get(f"{SCANNERS}/nmap", headers=guest)).status_code == 404
        missing = await client.patch(f"{SCANNERS}/nmap", json={"max_concurrent": 2}, headers=admin)
        assert missing.status_code == 404 and "nmap" in missing.json()["detail"]

        assert (await client.put(f"{SCANNERS}/nmap", json={}, headers=analyst)).status_code == 403
        mismatch = await client.put(f"{SCANNERS}/nmap", json={"name": "zmap"}, headers=admin)
        assert mismatch.status_code == 422 and field_errors(mismatch) == ["name"]
        too_big = await client.put(f"{SCANNERS}/nmap", json={"max_concurrent": 0}, headers=admin)
        assert too_big.status_code == 422 and field_errors(too_big) == ["max_concurrent"]
        unknown = await client.put(f"{SCANNERS}/nmap", json={"slots": 3}, headers=admin)
        assert unknown.status_code == 422 and field_errors(unknown) == ["slots"]
        bad_name = await client.put(f"{SCANNERS}/NMAP!", json={}, headers=admin)
        assert bad_name.status_code == 422 and field_errors(bad_name) == ["name"]
        empty = await client.patch(f"{SCANNERS}/compliance", json={}, headers=admin)
        assert empty.status_code == 422 and field_errors(empty) == ["body"]

        body = {"max_concurrent": 3, "timeout_seconds": 1200, "description": "port scans"}
        put = await client.put(f"{SCANNERS}/nmap", json=body, headers=admin)
        assert put.status_code == 202
        patched = await client.patch(
            f"{SCANNERS}/compliance", json={"is_active": False}, headers=admin
        )
        assert patched.status_code == 202

        # Nothing applies events here: the schedule is refused, its scanner unknown yet.
        refused = await client.post(J, json=job("nightly"), headers=admin)
        assert refused.status_code == 422 and field_errors(refused) == ["scanner"]
        assert "nmap" in refused.json()["detail"]
        await changes.wait_for(lambda: len(changes.records) >= 2, timeout=10, what="2 events")
    assert {record.key for record in changes.records} == {CONFIG_KEY.encode()}
    first, second = changes.values(topic)
    assert first["type"] == second["type"] == "scanner.upserted"
    assert first["event_id"] == put.json()["event_id"]
    assert first["scanner"] == {
        "name": "nmap",
        "description": "port scans",
        "is_active": True,
        "max_concurrent": 3,
        "timeout_seconds": 1200,
        "retry_delay_seconds": 300,
        "default_priority": 4,
    }
    # compliance's first PATCH carries its whole implicit entry, with the change.
    assert second["scanner"]["name"] == "compliance" and second["scanner"]["is_active"] is False
    assert (second["scanner"]["max_concurrent"], second["scanner"]["timeout_seconds"]) == (5, 600)


async def test_schedules_name_only_registered_active_scanners(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> None:
    settings = api_settings(bootstrap_servers, postgres_server, broker_kind)
    tokens = await prepare(settings)
    admin = bearer(tokens[Role.SECURITY_ADMIN])
    # Registered out of name order: the list is compliance first, then by name.
    await register_scanners(settings.database_url, "zmap", is_active=False)
    await register_scanners(settings.database_url, "nmap")
    async with running_api(settings) as client:
        listed = (await client.get(SCANNERS, headers=admin)).json()
        assert [(entry["name"], entry["is_active"]) for entry in listed["data"]] == [
            ("compliance", True),
            ("nmap", True),
            ("zmap", False),
        ]
        assert (await client.post(J, json=job("ok"), headers=admin)).status_code == 202
        assert (
            await client.post(J, json=job("adaptive", "compliance"), headers=admin)
        ).status_code == 202
        for scanner, words in (("zmap", "inactive"), ("masscan", "registered")):
            refused = await client.post(J, json=job(f"by-{scanner}", scanner), headers=admin)
            assert refused.status_code == 422, refused.text
            assert field_errors(refused) == ["scanner"] and words in refused.json()["detail"]


async def test_registry_changes_show_through_the_worker_and_gate_schedules(
    make_settings: Any, workers: Any
) -> None:
    settings = make_settings()
    tokens = await prepare(settings)
    workers(settings)
    admin, guest = bearer(tokens[Role.SECURITY_ADMIN]), bearer(tokens[Role.GUEST])
    async with running_api(settings) as client:
        put = await client.put(
            f"{SCANNERS}/nmap",
            params={"wait": "true"},
            json={"name": "nmap", "max_concurrent": 2, "default_priority": 6},
            headers=admin,
        )
        assert put.status_code == 200, put.text
        assert put.json()["max_concurrent"] == 2 and put.json()["in_flight"] == 0
        created = await client.post(J, params={"wait": "true"}, json=job("sweep"), headers=admin)
        assert created.status_code == 200, created.text

        off = await client.patch(
            f"{SCANNERS}/nmap", params={"wait": "true"}, json={"is_active": False}, headers=admin
        )
        assert off.status_code == 200, off.text
        assert off.json()["is_active"] is False and off.json()["default_priority"] == 6
        refused = await client.post(J, json=job("another"), headers=admin)
        assert refused.status_code == 422 and field_errors(refused) == ["scanner"]
        moved = await client.patch(f"{J}/sweep", json={"scanner": "nmap"}, headers=admin)
        assert moved.status_code == 422 and field_errors(moved) == ["scanner"]
        # The schedule stays, and can still be changed where the change names no scanner.
        kept = await client.patch(f"{J}/sweep", json={"priority": 3}, headers=admin)
        assert kept.status_code == 202
        assert (await client.get(f"{J}/sweep", headers=guest)).status_code == 200

        adaptive = await client.patch(
            f"{SCANNERS}/compliance",
            params={"wait": "true"},
            json={"timeout_seconds": 900},
            headers=admin,
        )
        assert adaptive.status_code == 200, adaptive.text
        config = (await client.get("/api/compliance/scheduler/config", headers=guest)).json()
        stored = {spec["name"]: spec for spec in config["scanners"]}
        assert stored["compliance"]["timeout_seconds"] == 900
        assert stored["compliance"]["max_concurrent"] == config["max_concurrent_scans"]
        assert stored["nmap"]["is_active"] is False
        listed = (await client.get(SCANNERS, headers=guest)).json()
        assert [entry["name"] for entry in listed["data"]] == ["compliance", "nmap"]

        await put_scanners(client, admin, "nmap")  # PUT replaces: the defaults, active again
        again = (await client.get(f"{SCANNERS}/nmap", headers=guest)).json()
        assert again["is_active"] is True and again["max_concurrent"] == 5
        assert (await client.post(J, json=job("another"), headers=admin)).status_code == 202


def test_cli_registers_changes_and_lists_scanners(
    make_settings: Any, workers: Any, tmp_path: Path
) -> None:
    settings = make_settings()
    tokens = asyncio.run(prepare(settings))
    workers(settings)
    with kairos_api(settings, tmp_path) as url:
        env = {**settings_env(settings), "KAIROS_API_URL": url}

        def kairos(
            *args: str, role: Role = Role.SECURITY_ADMIN
        ) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*kairos_executable(), "scanners", *args],
                env={**env, "KAIROS_TOKEN": tokens[role]},
                capture_output=True,
                text=True,
                timeout=60,
            )

        added = kairos("set", "nmap", "--max-concurrent", "4", "--timeout", "900")
        assert added.returncode == 0, added.stderr
        assert added.stdout.strip() == (
            "nmap: active, pool 4, timeout 900 s, retry delay 300 s, default priority 4"
        )
        held = kairos("set", "nmap", "--inactive", "--description", "port scans")
        assert held.returncode == 0, held.stderr
        assert "inactive (its commands are held), pool 4, timeout 900 s" in held.stdout

        listed = kairos("list", role=Role.GUEST)
        assert listed.returncode == 0, listed.stderr
        header, *rows = listed.stdout.splitlines()
        assert header.split()[:4] == ["NAME", "ACTIVE", "IN", "FLIGHT"]
        assert [row.split()[:2] for row in rows] == [["compliance", "yes"], ["nmap", "no"]]
        assert rows[1].split()[2:6] == ["0", "4", "900", "300"] and "port scans" in rows[1]
        shown = kairos("show", "nmap", "--json", role=Role.GUEST)
        assert json.loads(shown.stdout)["description"] == "port scans"

        missing = kairos("show", "masscan", role=Role.GUEST)
        assert missing.returncode == 4 and "404" in missing.stderr
        invalid = kairos("set", "nmap", "--max-concurrent", "0")
        assert invalid.returncode == 6 and "max_concurrent" in invalid.stderr
        forbidden = kairos("set", "nmap", "--active", role=Role.SECURITY_ANALYST)
        assert forbidden.returncode == 3 and "403" in forbidden.stderr
