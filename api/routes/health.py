"""Liveness, readiness and metrics: no authentication, for orchestrators and Prometheus."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from api import queries
from api.deps import Runtime, RuntimeDep, reject_unknown_query
from api.metrics import RequestMetrics, gauge
from kairos.db import DatabaseUnavailable, redact
from kairos.prometheus import CONTENT_TYPE
from schemas.api import HealthPublic, ReadinessPublic

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
    return PlainTextResponse("\n".join(lines) + "\n", media_type=CONTENT_TYPE)


async def _read_model_figures(runtime: Runtime) -> tuple[float | None, int | None, int]:
    try:
        async with runtime.pool.connection(timeout=min(runtime.timeout, 1.0)) as conn:
            lag, backlog, _ = await queries.get_projection_lag(conn)
            return lag, backlog, 1
    except Exception:  # noqa: BLE001 - metrics must answer while PostgreSQL is down
        return None, None, 0
