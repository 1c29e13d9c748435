"""Liveness, readiness and metrics: no authentication, for orchestrators and Prometheus."""

from __future__ import annotations

import asyncio
from datetime import UTC

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from api import queries
from api.deps import Runtime, RuntimeDep, reject_unknown_query
from api.metrics import RequestMetrics, gauge
from kairos.floor.db import DatabaseUnavailable, redact
from kairos.floor.forecast import forecast
from kairos.floor.prometheus import CONTENT_TYPE
from schemas.api import HealthPublic, ReadinessPublic

FORECAST_HOURS = 48
"""The horizon of the forecast `/metrics` reports: the 48 h promise."""

router = APIRouter(tags=["health"], dependencies=[Depends(reject_unknown_query)])


@router.get("/healthz", response_model=HealthPublic)
async def healthz() -> HealthPublic:
    """The process is up; says nothing about Kafka or PostgreSQL."""
    return HealthPublic(status="ok")


@router.get(
    "/readyz",
    response_model=ReadinessPublic,
    responses={503: {"model": ReadinessPublic, "description": "Kafka or PostgreSQL is not."}},
)
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    """Ready when Kafka answers (with the schedule-changes topic) and the read model does."""
    kafka, database = await runtime.readiness.get(lambda: _readiness(runtime))
    ready = kafka == "ok" and database == "ok"
    problems = [f"{name}: {state}" for name, state in (("kafka", kafka), ("database", database))]
    body = ReadinessPublic(
        detail="ready"
        if ready
        else "not ready; "
        + "; ".join(problem for problem in problems if not problem.endswith(": ok")),
        status="ready" if ready else "unavailable",
        kafka=kafka,
        database=database,
    )
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


async def _readiness(runtime: Runtime) -> tuple[str, str]:
    kafka, database = await asyncio.gather(runtime.publisher.check(), _database(runtime))
    return kafka, database


async def _database(runtime: Runtime) -> str:
    try:
        async with runtime.pool.connection(timeout=runtime.timeout) as conn:
            await queries.check_read_model(conn)
    except DatabaseUnavailable as error:
        return str(error)
    except Exception as error:  # noqa: BLE001 - pool timeouts and closed pools alike
        return f"PostgreSQL at {redact(runtime.settings.database_url)}: {type(error).__name__}"
    return "ok"


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(request: Request, runtime: RuntimeDep) -> PlainTextResponse:
    """Prometheus text format: requests and latency per route, pool, projection lag."""
    requests: RequestMetrics = request.app.state.metrics
    lines = requests.lines()
    for name, value in sorted(runtime.pool.get_stats().items()):
        stat = name.removeprefix("pool_")
        lines += gauge(f"kairos_db_pool_{stat}", f"psycopg pool statistic {name}.", value)
    lag, backlog, reachable = await runtime.read_model_figures.get(
        lambda: _read_model_figures(runtime)
    )
    lines += gauge("kairos_read_model_up", "1 if the read model answered this scrape.", reachable)
    lines += gauge(
        "kairos_projection_lag_seconds",
        "Seconds from the newest projected event to its projection (worst source).",
        lag,
    )
    lines += gauge(
        "kairos_projection_backlog_messages", "Messages the projector has yet to apply.", backlog
    )
    forecast = await runtime.forecast_figures.get(lambda: _forecast_figures(runtime))
    kept, misses = forecast if forecast is not None else (None, None)
    lines += gauge(
        "kairos_forecast_promise_kept",
        "1 if the forecast of the next 48 h scans every host within the promise, 0 if not"
        " (computed at most once a minute).",
        kept,
    )
    lines += gauge(
        "kairos_forecast_hosts_missing_promise",
        "Hosts the forecast of the next 48 h scans later than the promise.",
        misses,
    )
    return PlainTextResponse("\n".join(lines) + "\n", media_type=CONTENT_TYPE)


async def _forecast_figures(runtime: Runtime) -> tuple[int, int] | None:
    now = runtime.clock.now().astimezone(UTC)
    try:
        async with runtime.pool.connection(timeout=min(runtime.timeout, 1.0)) as conn:
            inputs = await queries.forecast_inputs(conn, now=now, hours=FORECAST_HOURS)
    except Exception:  # noqa: BLE001 - metrics must answer while PostgreSQL is down
        return None
    # Pure Python over every scannable host: off the event loop, so requests keep flowing.
    result = await asyncio.to_thread(forecast, now=now, hours=FORECAST_HOURS, **inputs)
    return int(result.promise_kept), len(result.misses)


async def _read_model_figures(runtime: Runtime) -> tuple[float | None, int | None, int]:
    try:
        async with runtime.pool.connection(timeout=min(runtime.timeout, 1.0)) as conn:
            lag, backlog, _ = await queries.get_projection_lag(conn)
            return lag, backlog, 1
    except Exception:  # noqa: BLE001 - metrics must answer while PostgreSQL is down
        return None, None, 0
