"""GET /forecast over a read model seeded with a fleet whose next hours are worked out by hand."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from psycopg.types.json import Jsonb

from kairos.floor.clock import FrozenClock
from kairos.floor.db import connect
from schemas.api import Role
from tests.integration.test_api import (
    T0,
    P,
    api_settings,
    bearer,
    insert_command,
    insert_host,
    insert_scan,
    prepare,
    running_api,
)

pytestmark = pytest.mark.integration

MIN = timedelta(minutes=1)


async def test_forecast_names_the_host_one_slot_cannot_reach_in_time(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> None:
    settings = api_settings(bootstrap_servers, postgres_server, broker_kind)
    tokens = await prepare(settings)
    last = T0 - timedelta(hours=47, minutes=30)
    async with await connect(settings.database_url) as conn:
        # One slot; scans measured at 20, 30, 30, 30 and 60 min: p50 30 min, p90 60 min.
        await conn.execute(
            "INSERT INTO scheduler_config (config, version, updated_at) VALUES (%s, %s, %s)",
            (Jsonb({"max_concurrent_scans": 1}), 2, T0 - timedelta(days=1)),
        )
        for host_id in ("h1", "h2", "h3"):
            await insert_host(
                conn, host_id, T0, current_interval_minutes=60, last_scan_completed=last
            )
        # Not scannable: never in the forecast.
        await insert_host(conn, "resting", T0, maintenance_mode=True, last_scan_completed=last)
        for number, minutes in enumerate((20, 30, 30, 30, 60)):
            done = T0 - timedelta(hours=number + 1)
            await insert_scan(conn, f"c{number}", "h1", done, started_at=done - minutes * MIN)
        await conn.commit()
    async with running_api(settings, clock=FrozenClock(T0)) as client:
        answer = await client.get(
            f"{P}/forecast", params={"hours": 3}, headers=bearer(tokens[Role.GUEST])
        )
        too_far = await client.get(
            f"{P}/forecast", params={"hours": 169}, headers=bearer(tokens[Role.GUEST])
        )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # By hand: h1 0-30, h2 30-60, h3 60-90 (its deadline was 30), h1 90-120, h2 120-150,
    # h3 150-180; due per hour 3, 1, 2.
    assert (body["scan_seconds_p50"], body["scan_seconds_p90"], body["measured_scans"]) == (
        1800,
        3600,
        5,
    )
    assert [hour["due"] for hour in body["hourly"]] == [3, 1, 2]
    assert [hour["started"] for hour in body["hourly"]] == [2, 2, 2]
    assert [(hour["capacity"], hour["capacity_p90"]) for hour in body["hourly"]] == [(2, 1)] * 3
    assert body["promise_kept"] is False and body["promise_hours"] == 48
    (miss,) = body["misses"]
    assert miss["host_id"] == "h3"
    assert miss["starts_at"].startswith((T0 + 60 * MIN).isoformat()[:16])
    assert too_far.status_code == 422


async def test_forecast_measures_scans_without_a_start_from_their_command_issue(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> None:
    settings = api_settings(bootstrap_servers, postgres_server, broker_kind)
    tokens = await prepare(settings)
    async with await connect(settings.database_url) as conn:
        await insert_host(conn, "h1", T0 + timedelta(hours=1), current_interval_minutes=60)
        # Agents that send no start: 2, 4 and 6 min from the command's issue to the result.
        for number, minutes in enumerate((2, 4, 6)):
            done = T0 - timedelta(hours=number + 1)
            await insert_command(conn, f"c{number}", "h1", done - minutes * MIN)
            await insert_scan(conn, f"c{number}", "h1", done, started_at=None)
        # One with a start (1 min) counts from it, not from its issue 30 min before.
        await insert_command(conn, "c-started", "h1", T0 - 40 * MIN)
        await insert_scan(conn, "c-started", "h1", T0 - 10 * MIN, started_at=T0 - 11 * MIN)
        # Neither a start nor a command (an unmatched result), or a failed scan: not measured.
        await insert_scan(conn, "c-unknown", "h1", T0 - 5 * MIN, started_at=None)
        await insert_command(conn, "c-failed", "h1", T0 - 60 * MIN)
        await insert_scan(
            conn, "c-failed", "h1", T0 - 2 * MIN, started_at=None, status="failed", score=None
        )
        await conn.commit()
    async with running_api(settings, clock=FrozenClock(T0)) as client:
        answer = await client.get(
            f"{P}/forecast", params={"hours": 1}, headers=bearer(tokens[Role.GUEST])
        )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # Measured: 60, 120, 240, 360 s: nearest-rank p50 120 s, p90 360 s.
    assert (body["scan_seconds_p50"], body["scan_seconds_p90"], body["measured_scans"]) == (
        120,
        360,
        4,
    )
