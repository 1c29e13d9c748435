"""The scheduled-jobs API in front of a real worker: system schedules, ETag / If-Match,
a schedule created again under a deleted one's name, and per-request overlap policies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from schemas.api import Role
from tests.integration.test_api import bearer, prepare, running_api
from tests.support.kafka import Collector
from tests.support.scanners import put_scanners

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

J = "/api/scheduled-jobs"
NOBODY = {"filter": {"field": "labels.env", "op": "eq", "value": "absent"}}


def job(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "scanner": "nmap",
        "recurrence": {"kind": "cron", "expression": "0 * * * *"},
        "targets": NOBODY,
        **fields,
    }


async def until(
    client: httpx.AsyncClient,
    path: str,
    headers: dict[str, str],
    holds: Callable[[httpx.Response], bool],
    *,
    timeout: float = 30,
) -> httpx.Response:
    started = time.monotonic()
    while True:
        response = await client.get(path, headers=headers)
        if holds(response):
            return response
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{path}: still {response.status_code} {response.text[:400]}")
        await asyncio.sleep(0.2)


async def test_only_super_admin_writes_a_system_schedule_and_its_delete_works(
    make_settings, workers
) -> None:
    settings = make_settings()
    workers(settings)
    tokens = await prepare(settings)
    headers = {role: bearer(tokens[role]) for role in Role}
    lesser = [Role.GUEST, Role.SECURITY_ANALYST, Role.SECURITY_ADMIN]
    system = job("sys-inventory", is_system=True)
    async with running_api(settings) as client:
        await put_scanners(client, headers[Role.SECURITY_ADMIN], "nmap")
        for role in lesser:
            answer = await client.post(J, json=system, headers=headers[role])
            assert answer.status_code == 403, (role, answer.text)
        created = await client.post(J, json=system, headers=headers[Role.SUPER_ADMIN])
        assert created.status_code == 202, created.text
        path = f"{J}/sys-inventory"
        await until(client, path, headers[Role.GUEST], lambda r: r.status_code == 200)

        change = {"description": "changed"}
        for role in lesser:
            assert (await client.patch(path, json=change, headers=headers[role])).status_code == 403
            assert (await client.post(f"{path}/pause", headers=headers[role])).status_code == 403
            assert (await client.post(f"{path}/disable", headers=headers[role])).status_code == 403
            assert (await client.delete(path, headers=headers[role])).status_code == 403
        # An ordinary schedule cannot be turned into a system one by an admin either.
        plain = await client.post(J, json=job("plain"), headers=headers[Role.SECURITY_ADMIN])
        assert plain.status_code == 202
        await until(client, f"{J}/plain", headers[Role.GUEST], lambda r: r.status_code == 200)
        promote = await client.patch(
            f"{J}/plain", json={"is_system": True}, headers=headers[Role.SECURITY_ADMIN]
        )
        assert promote.status_code == 403

        boss = headers[Role.SUPER_ADMIN]
        assert (await client.patch(path, json=change, headers=boss)).status_code == 202
        assert (await client.post(f"{path}/pause", headers=boss)).status_code == 202
        await until(
            client,
            path,
            boss,
            lambda r: r.json()["paused"] and r.json()["definition"]["description"] == "changed",
        )
        assert (await client.delete(path, headers=boss)).status_code == 202
        await until(client, path, boss, lambda r: r.status_code == 404)
        listed = (await client.get(J, headers=boss)).json()
    assert [item["name"] for item in listed["data"]] == ["plain"]


async def test_if_match_refuses_an_edit_of_a_schedule_that_changed_meanwhile(
    make_settings, workers
) -> None:
    settings = make_settings()
    workers(settings)
    tokens = await prepare(settings)
    admin = bearer(tokens[Role.SECURITY_ADMIN])
    async with running_api(settings) as client:
        await put_scanners(client, admin, "nmap")
        assert (await client.post(J, json=job("etagged"), headers=admin)).status_code == 202
        path = f"{J}/etagged"
        first = await until(client, path, admin, lambda r: r.status_code == 200)
        tag = first.headers["ETag"]
        assert tag.startswith('"') and tag.endswith('"')

        edit = await client.patch(
            path, json={"description": "one"}, headers={**admin, "If-Match": tag}
        )
        assert edit.status_code == 202
        second = await until(client, path, admin, lambda r: r.headers["ETag"] != tag)
        assert second.json()["definition"]["description"] == "one"

        # Another client still holds the first ETag: its edit and its delete are refused.
        stale = {**admin, "If-Match": tag}
        lost = await client.patch(path, json={"description": "two"}, headers=stale)
        assert lost.status_code == 412, lost.text
        assert (await client.delete(path, headers=stale)).status_code == 412
        kept = (await client.get(path, headers=admin)).json()
        assert kept["definition"]["description"] == "one"

        current = {**admin, "If-Match": second.headers["ETag"]}
        assert (await client.delete(path, headers=current)).status_code == 202
        await until(client, path, admin, lambda r: r.status_code == 404)


async def test_a_schedule_created_again_under_a_deleted_name_has_no_history(
    make_settings, workers
) -> None:
    settings = make_settings(clock_speed=3600.0, clock_origin=datetime.now(UTC))
    workers(settings)
    tokens = await prepare(settings)
    admin = bearer(tokens[Role.SECURITY_ADMIN])
    path = f"{J}/reborn"
    async with running_api(settings) as client:
        await put_scanners(client, admin, "nmap")
        assert (await client.post(J, json=job("reborn"), headers=admin)).status_code == 202
        await until(
            client,
            f"{path}/history",
            admin,
            lambda r: r.status_code == 200 and r.json()["stats"]["skipped"] >= 2,
        )
        assert (await client.delete(path, headers=admin)).status_code == 202
        await until(client, path, admin, lambda r: r.status_code == 404)
        again = job("reborn", recurrence={"kind": "none"})
        assert (await client.post(J, json=again, headers=admin)).status_code == 202
        await until(client, path, admin, lambda r: r.status_code == 200)
        history = (await client.get(f"{path}/history", headers=admin)).json()
        detail = (await client.get(path, headers=admin)).json()
    assert history["count"] == 0 and history["data"] == [], history
    assert history["stats"]["total"] == 0 and detail["recent_runs"] == []


async def test_trigger_and_backfill_carry_their_own_overlap_policy(make_settings, workers) -> None:
    settings = make_settings()
    workers(settings)
    tokens = await prepare(settings)
    admin = bearer(tokens[Role.SECURITY_ADMIN])
    topic = settings.topics.schedule_changes
    async with Collector(settings, topic) as changes, running_api(settings) as client:
        await put_scanners(client, admin, "nmap")
        assert (await client.post(J, json=job("overlapping"), headers=admin)).status_code == 202
        path = f"{J}/overlapping"
        await until(client, path, admin, lambda r: r.status_code == 200)
        trigger = await client.post(f"{path}/trigger", json={"overlap": "allow"}, headers=admin)
        assert trigger.status_code == 202, trigger.text
        assert (await client.post(f"{path}/trigger", headers=admin)).status_code == 202
        bad = await client.post(f"{path}/trigger", json={"overlap": "sometimes"}, headers=admin)
        assert bad.status_code == 422
        window = {"start": "2020-01-01T00:00:00Z", "end": "2020-01-01T03:00:00Z"}
        backfill = await client.post(
            f"{path}/backfill", json={**window, "overlap": "skip"}, headers=admin
        )
        assert backfill.status_code == 202, backfill.text
        await changes.wait_for(
            lambda: len(changes.values(topic)) >= 5, timeout=15, what="the published requests"
        )
    published = [
        (v["type"], v.get("overlap"))
        for v in changes.values(topic)
        if v["type"] != "scanner.upserted"  # the registration of nmap, on its own key
    ]
    assert published[1:4] == [
        ("schedule.triggered", "allow"),
        ("schedule.triggered", None),
        ("schedule.backfill_requested", "skip"),
    ]
