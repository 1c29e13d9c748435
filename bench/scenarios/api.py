"""6. API latency: a real `kairos api` over a read model of N hosts, under concurrent load.

The read model is seeded straight into PostgreSQL with COPY (no worker, no Kafka traffic):
N host_schedule rows with mixed states, organizations and labels; next scans spread evenly
from 15 min ago to a day ahead (so ~1 % are due, and those carry an in-flight command id);
2 % in maintenance, 1 % inactive, 1 % down. host_state_counts / host_flag_counts are filled
from the rows themselves (as the projector keeps them), a projection_progress row is written,
the table is VACUUM ANALYZEd, and one GUEST token is created (`api.tokens.create_token`).
scan_results stays empty, so GET /hosts/{id} finds no latest scan (its second query is an
index probe that returns nothing).

`kairos api` (uvicorn, one process, the product's pool of 20 connections) starts on a free
loopback port. An httpx.AsyncClient load generator in the bench process then calls each
endpoint in turn — GET /hosts/{random id}, /status, /hosts-due?limit=10 — first with 1
request in flight, then with 8, each phase bounded by a request count and a time limit, after
a short warm-up. Latency is client-side (send → full response read), so it includes HTTP,
FastAPI, the token lookup every call makes, and the bench's own httpx overhead.

Floor: the same statements (`api.tokens.caller_of` + the `api.queries` function the route
calls) run directly with psycopg from the bench process, one connection per concurrent
caller, same concurrency and counts. "Kairos ÷ best baseline" is the API over that floor.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg

from bench.metrics import distribution
from bench.report import Figure, fmt, plot_latency
from bench.scenarios.common import Context, new_result
from bench.stack import ChildProcess, cpu_seconds, kairos_executable, worker_env
from kairos.floor.settings import Settings

KEY, NUMBER, TITLE = "api", 6, "API latency"
PREFIX = "/api/compliance/scheduler"
ENDPOINTS = {  # name -> target p99 (s)
    "/hosts/{id}": 0.010,
    "/status": 0.050,
    "/hosts-due?limit=10": 0.020,
}
LEVELS = (1, 8)
WARM_UP = 100  # requests per phase before measuring
STATES = ("compliant",) * 6 + ("mostly_compliant", "partial", "low", "critical", "unknown")
COLUMNS = (
    "host_id", "state", "compliance_state", "score", "current_interval_minutes",
    "next_scheduled_scan", "last_scan_completed", "last_scan_id", "last_error",
    "maintenance_mode", "maintenance_until", "scan_priority", "consecutive_scan_failures",
    "in_flight_command_id", "is_active", "status", "hostname", "organization", "attributes",
    "labels", "version", "deleted", "created_at", "updated_at",
)  # fmt: skip


def host_id(number: int) -> str:
    return f"api-{number:07d}"


def _rows(n: int, now: float, start: int, stop: int) -> bytes:
    """COPY text-format lines for hosts start..stop-1 (deterministic, mixed)."""
    stamps: dict[int, str] = {}

    def stamp(t: float) -> str:  # whole seconds, cached: a day has only 86,400 of them
        second = int(t)
        text = stamps.get(second)
        if text is None:
            text = stamps[second] = datetime.fromtimestamp(second, UTC).isoformat()
        return text

    NULL = "\\N"  # noqa: N806
    created, updated, until = stamp(now - 30 * 86_400), stamp(now), stamp(now + 3600)
    lines = []
    for i in range(start, stop):
        host = host_id(i)
        due = now - 900 + (i * 7919 % n) / n * 86_400  # spread evenly over a day, 15 min late
        maintenance = i % 50 == 7
        inactive = i % 100 == 11
        down = i % 100 == 13
        compliance = STATES[i % len(STATES)]
        state = "maintenance" if maintenance else compliance
        score = NULL if compliance == "unknown" else f"{40 + i % 61}.0"
        in_flight = f"{host}:cmd" if due <= now and not (maintenance or inactive or down) else NULL
        org = f"org-{i % 20}"
        status = "down" if down else "up"
        labels = f'{{"env": "{"prod" if i % 3 else "staging"}", "team": "team-{i % 40}"}}'
        attributes = (
            f'{{"hostname": "{host}.bench.test", "ip": "10.0.{i >> 8 & 255}.{i & 255}",'
            f' "os": "rhel-9", "organization": "{org}", "is_active": '
            f'{"false" if inactive else "true"}, "status": "{status}"}}'
        )
        lines.append(
            f"{host}\t{state}\t{compliance}\t{score}\t"
            f"{1440 if compliance == 'compliant' else 360}\t{stamp(due)}\t{stamp(due - 86_400)}\t"
            f"scan-{i}\t\\N\t{'t' if maintenance else 'f'}\t{until if maintenance else NULL}\t"
            f"{10 + i % 5}\t0\t{in_flight}\t{'f' if inactive else 't'}\t{status}\t"
            f"{host}.bench.test\t{org}\t{attributes}\t{labels}\t{1 + i % 40}\tf\t"
            f"{created}\t{updated}"
        )  # fmt: skip
    return ("\n".join(lines) + "\n").encode()


async def seed(settings: Settings, n: int, ui_phase: Any) -> dict[str, Any]:
    """COPY n rows, fill the counters from them, VACUUM ANALYZE; seconds per step."""
    now = time.time()
    timings: dict[str, Any] = {}
    started = time.monotonic()
    async with await psycopg.AsyncConnection.connect(settings.database_url) as conn:
        async with conn.cursor() as cursor:
            statement = f"COPY host_schedule ({', '.join(COLUMNS)}) FROM STDIN"
            async with cursor.copy(statement) as copy:
                for start in range(0, n, 20_000):
                    await copy.write(_rows(n, now, start, min(n, start + 20_000)))
                    ui_phase.update(min(n, start + 20_000))
        await conn.execute(
            "INSERT INTO host_state_counts (state, hosts) SELECT state, count(*)"
            " FROM host_schedule WHERE NOT deleted GROUP BY state"
        )
        await conn.execute(
            "INSERT INTO host_flag_counts (flag, hosts) SELECT flag, count(*) FROM ("
            " SELECT unnest(ARRAY["
            "  CASE WHEN in_flight_command_id IS NOT NULL THEN 'in_flight' END,"
            "  CASE WHEN maintenance_mode THEN 'maintenance' END,"
            "  CASE WHEN NOT is_active THEN 'inactive' END,"
            "  CASE WHEN status = 'down' THEN 'down' END]) AS flag"
            " FROM host_schedule WHERE NOT deleted) AS flags WHERE flag IS NOT NULL GROUP BY flag"
        )
        await conn.execute(
            "INSERT INTO projection_progress (source, newest_event_at, applied_at, consumer_lag,"
            " lag_seconds) VALUES ('projector', now(), now(), 0, 0.05)"
        )
        await conn.commit()
        timings["copy_and_counters_seconds"] = time.monotonic() - started
        await conn.set_autocommit(True)
        await conn.execute("VACUUM ANALYZE host_schedule")
        timings["seconds_total"] = time.monotonic() - started
        cursor = await conn.execute(
            "SELECT (SELECT count(*) FROM host_schedule),"
            " (SELECT count(*) FROM host_schedule WHERE next_scheduled_scan <= now()),"
            " pg_total_relation_size('host_schedule')"
        )
        row = await cursor.fetchone()
        assert row is not None
        timings.update(rows=row[0], due_now=row[1], table_bytes=row[2])
        states = await (await conn.execute("SELECT state, hosts FROM host_state_counts")).fetchall()
        flags = await (await conn.execute("SELECT flag, hosts FROM host_flag_counts")).fetchall()
        timings["counts"] = {"states": dict(states), "flags": dict(flags)}
    return timings


async def make_token(settings: Settings) -> str:
    from api.tokens import create_token
    from schemas.api import Role

    async with await psycopg.AsyncConnection.connect(settings.database_url) as conn:
        return await create_token(
            conn,
            role=Role.GUEST,
            name="bench-guest",
            secret=settings.token_secret.get_secret_value(),
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def start_api(ctx: Context, settings: Settings) -> tuple[ChildProcess, str]:
    port = free_port()
    child = ctx.stack.spawn(
        "api",
        [*kairos_executable(), "api", "--host", "127.0.0.1", "--port", str(port)],
        worker_env(settings),
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    answer = ""
    async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=2.0) as client:
        while time.monotonic() < deadline:
            if not child.alive():
                raise RuntimeError(f"kairos api exited:\n{child.log_tail()}")
            try:
                response = await client.get("/readyz")
                if response.status_code == 200:
                    return child, base
                answer = response.text[:500]
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.3)
    raise RuntimeError(f"kairos api not ready in 90 s: {answer}\n{child.log_tail(800)}")


Call = Callable[[int], Awaitable[None]]


async def drive(calls: list[Call], count: int, limit: float) -> dict[str, Any]:
    """Run len(calls) callers concurrently until `count` requests or `limit` seconds."""
    latencies: list[float] = []
    errors: list[str] = []
    issued = 0
    started = time.perf_counter()

    async def caller(call: Call) -> None:
        nonlocal issued
        while issued < count and time.perf_counter() - started < limit:
            issued += 1
            begin = time.perf_counter()
            try:
                await call(issued)
            except Exception as error:  # noqa: BLE001 - counted and reported
                errors.append(f"{type(error).__name__}: {str(error)[:200]}")
                continue
            latencies.append(time.perf_counter() - begin)

    await asyncio.gather(*(caller(call) for call in calls))
    wall = time.perf_counter() - started
    return {"requests": len(latencies), "errors": len(errors), "first_errors": errors[:5],
            "seconds": wall, "rate": len(latencies) / wall if wall else None,
            "latency_s": distribution(latencies), "_latencies": latencies}  # fmt: skip


def path_for(endpoint: str, rng: random.Random, n: int) -> str:
    if endpoint == "/hosts/{id}":
        return f"{PREFIX}/hosts/{host_id(rng.randrange(n))}"
    return PREFIX + endpoint


async def api_phase(base: str, token: str, endpoint: str, n: int, concurrency: int,
                    count: int, limit: float) -> dict[str, Any]:  # fmt: skip
    rng = random.Random(concurrency)
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits,
                                 trust_env=False, timeout=10.0) as client:  # fmt: skip

        async def call(_: int) -> None:
            response = await client.get(path_for(endpoint, rng, n))
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")

        await drive([call] * concurrency, min(WARM_UP, count), 10.0)  # warm-up, not measured
        return await drive([call] * concurrency, count, limit)


async def floor_phase(settings: Settings, token: str, endpoint: str, n: int, concurrency: int,
                      count: int, limit: float) -> dict[str, Any]:  # fmt: skip
    from api import queries, tokens

    rng = random.Random(concurrency)
    conns = [
        await psycopg.AsyncConnection.connect(
            settings.database_url, autocommit=True,
            options=f"-c statement_timeout={int(queries.QUERY_TIMEOUT_SECONDS * 1000)}")
        for _ in range(concurrency)
    ]  # fmt: skip

    def caller_for(conn: psycopg.AsyncConnection) -> Call:
        async def call(_: int) -> None:
            if await tokens.caller_of(conn, token) is None:
                raise RuntimeError("token not found")
            now = datetime.now(UTC)
            if endpoint == "/hosts/{id}":
                if await queries.get_host(conn, host_id=host_id(rng.randrange(n))) is None:
                    raise RuntimeError("host not found")
            elif endpoint == "/status":
                await queries.get_status(conn, now=now)
            else:
                await queries.list_hosts_due(conn, now=now, limit=10)

        return call

    try:
        calls = [caller_for(conn) for conn in conns]
        await drive(calls, min(WARM_UP, count), 10.0)
        return await drive(calls, count, limit)
    finally:
        for conn in conns:
            await conn.close()


def _cpu(
    pid: int, before: float | None, wall: float, phase: dict[str, Any], count: int, name: str
) -> dict[str, float | None]:
    """Cores used by `pid` over a phase (warm-up included) and CPU ms per request."""
    after = cpu_seconds(pid)
    if before is None or after is None or not wall:
        return {f"{name}_cpu_cores": None, f"{name}_cpu_ms_per_request": None}
    requests = phase["requests"] + phase["errors"] + min(WARM_UP, count)
    return {
        f"{name}_cpu_cores": (after - before) / wall,
        f"{name}_cpu_ms_per_request": (after - before) * 1000 / max(requests, 1),
    }


async def run(ctx: Context, systems: set[str] | None = None) -> Any:
    from kairos.floor.db import migrate
    from streams.admin import ensure_topics

    n = ctx.size(quick=200_000, full=1_000_000)
    count = 1_000 if ctx.quick else 10_000
    limit = 8.0 if ctx.quick else 60.0
    result = new_result(ctx, KEY, NUMBER, TITLE, hosts=n, concurrency=list(LEVELS),
                        requests_per_phase=count, seconds_per_phase=limit)  # fmt: skip
    settings = ctx.stack.settings("api")
    await ensure_topics(settings)  # /readyz wants the schedule-changes topic
    await migrate(settings.database_url)
    with ctx.ui.phase(f"seeding host_schedule with {n:,} rows (COPY)", total=n) as phase:
        result.details["seed"] = await seed(settings, n, phase)
    token = await make_token(settings)
    child, base = await start_api(ctx, settings)
    measured: dict[str, dict[str, Any]] = {}
    try:
        for endpoint in ENDPOINTS:
            for level in LEVELS:
                label = f"{endpoint} c={level}"
                with ctx.ui.phase(f"API {label}"):
                    cpu_api, cpu_bench = cpu_seconds(child.pid), cpu_seconds(os.getpid())
                    began = time.monotonic()
                    api = await api_phase(base, token, endpoint, n, level, count, limit)
                    wall = time.monotonic() - began
                    api.update(_cpu(child.pid, cpu_api, wall, api, count, "api"))
                    api.update(_cpu(os.getpid(), cpu_bench, wall, api, count, "load_generator"))
                with ctx.ui.phase(f"psycopg floor {label}"):
                    floor = await floor_phase(settings, token, endpoint, n, level, count, limit)
                measured[label] = {"api": api, "psycopg": floor}
        result.details["api_rss_bytes_end"] = child.rss()
    finally:
        child.stop(grace=5.0)
        if child in ctx.stack.children:
            ctx.stack.children.remove(child)
    result.details["phases"] = {
        label: {side: {k: v for k, v in values.items() if not k.startswith("_")}
                for side, values in sides.items()}
        for label, sides in measured.items()
    }  # fmt: skip
    scale = f"at {n:,} hosts" + (" (quick)" if ctx.quick else "")
    for endpoint, target in ENDPOINTS.items():
        for level, keys in ((8, ("p50", "p99")), (1, ("p99",))):
            sides = measured[f"{endpoint} c={level}"]
            for key in keys:
                value = sides["api"]["latency_s"].get(key, math.nan)
                floor = sides["psycopg"]["latency_s"].get(key, math.nan)
                headline = level == 8 and key == "p99"
                result.figures.append(Figure(
                    label=f"GET {endpoint} {key}, {level} in flight "
                          f"(psycopg floor {fmt(floor, 's')})",
                    unit="s", kairos=value, baselines={"psycopg direct": floor},
                    target=target if headline else None,
                    target_text=f"p99 ≤ {target * 1000:.0f} ms" if headline else "",
                    scale_note=scale if headline else ""))  # fmt: skip
    errors = {label: sides["api"]["errors"] for label, sides in measured.items()
              if sides["api"]["errors"]}  # fmt: skip
    result.notes += [
        f"{'Quick' if ctx.quick else 'Full'} mode: {n:,} hosts seeded by COPY "
        f"({result.details['seed']['seconds_total']:.1f} s incl. VACUUM ANALYZE, "
        f"{result.details['seed']['due_now']:,} due now); per endpoint and level at most "
        f"{count:,} requests or {limit:.0f} s after {WARM_UP} warm-up requests.",
        "Client-side latency from the bench's httpx.AsyncClient over loopback; one uvicorn "
        "process, the load generator and PostgreSQL share the 2 cores. The psycopg floor runs "
        "the same statements (token lookup + the route's query function) without HTTP.",
        f"API errors: {errors}" if errors else "No API errors.",
    ]
    png = ctx.plot_path(KEY, "latency")
    series = {f"API {label}": sides["api"]["_latencies"] for label, sides in measured.items()
              if label.endswith("c=8")}  # fmt: skip
    if plot_latency(png, series, "API latency, 8 requests in flight", "latency"):
        result.plots.append(png.name)
    return result
