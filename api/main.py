"""The API's FastAPI app: `create_app(settings)` assembles routes, middleware, the console and
the agents' gateway. The PostgreSQL pool and the Kafka publisher open in the app's lifespan,
not here, so importing or building the app connects to nothing and a dependency that is down
at start makes calls answer 503 instead of stopping the API.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from psycopg_pool import AsyncConnectionPool

from api import console, errors
from api.body_limit import BodyLimitMiddleware
from api.deps import Runtime, reject_unknown_query
from api.metrics import MetricsMiddleware, RequestMetrics
from api.publisher import Publisher
from api.queries import QUERY_TIMEOUT_SECONDS
from api.routes import (
    agents,
    audit,
    commands,
    health,
    hosts,
    jobs,
    operations,
    scanners,
    scheduler,
    workers,
)
from api.tokens import TokenVerifier
from kairos.floor.clock import Clock, clock_for_speed
from kairos.floor.settings import Settings, topic_durability_problem

log = logging.getLogger(__name__)

POOL_MAX_SIZE = 20
WAIT_SECONDS = 5.0
CALL_TIMEOUT_SECONDS = 5.0
"""Upper bound on waiting for one dependency (a pooled connection, a Kafka acknowledgement)."""
JOBS_IN_OPENAPI = True

DESCRIPTION = """\
Reads come from the PostgreSQL read model; writes are published as events on
`schedule-changes` and answered `202` with the event id (or `200` with the new state when
`?wait=true` and the projection shows the change within 5 s).

Every call but `/healthz`, `/readyz` and `/metrics` needs `Authorization: Bearer <token>`
(`kairos token create --role ROLE [--ttl 30d]`), checked before the body is read. Roles:
GUEST < SECURITY_ANALYST < SECURITY_ADMIN < SUPER_ADMIN; a role may do what any lower one may.
A body longer than the configured limit (1 MiB by default) is answered `413`. Errors always
have the shape `{"detail": "...", "errors": [...]}`.
"""


def create_app(
    settings: Settings, *, clock: Clock | None = None, wait_seconds: float = WAIT_SECONDS
) -> FastAPI:
    """The API for `settings`. Kafka and PostgreSQL may be down at start: calls then get 503.

    `wait_seconds` bounds `?wait=true`; tests that never run a projector shorten it.
    Refuses (ValueError) prod settings whose topics would lose acknowledged events.
    """
    problem = topic_durability_problem(settings)
    if problem:
        raise ValueError(problem)
    timeout = min(settings.connect_timeout_seconds, CALL_TIMEOUT_SECONDS)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = AsyncConnectionPool(
            settings.database_url,
            min_size=1,
            max_size=POOL_MAX_SIZE,
            open=False,
            timeout=timeout,
            name="kairos-api",
            check=AsyncConnectionPool.check_connection,
            kwargs={
                "autocommit": True,
                "connect_timeout": max(1, int(timeout)),
                "options": f"-c statement_timeout={int(QUERY_TIMEOUT_SECONDS * 1000)}",
            },
        )
        await pool.open(wait=False)
        publisher = Publisher(settings, timeout=timeout)
        await publisher.start()
        app.state.runtime = Runtime(
            settings=settings,
            clock=clock
            or clock_for_speed(settings.clock_speed, settings.clock_origin, settings.clock_start),
            pool=pool,
            publisher=publisher,
            timeout=timeout,
            wait_seconds=wait_seconds,
            token_verifier=TokenVerifier(
                settings.token_secret_values(),
                cache_seconds=settings.api_token_cache_seconds,
            ),
        )
        try:
            yield
        finally:
            await publisher.stop()
            await pool.close(timeout=timeout)

    app = FastAPI(
        title="Kairos",
        version="0.42.0",  # The release's, as in pyproject.toml (CHANGELOG.md, "Releasing").
        description=DESCRIPTION,
        lifespan=lifespan,
        dependencies=[Depends(reject_unknown_query)],
        docs_url=None,  # console.install serves /docs and /redoc from packaged assets
        redoc_url=None,
    )
    app.state.metrics = RequestMetrics()
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.api_max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    errors.install(app)
    # The health routes sit on the app itself rather than in an included router, so that
    # `app.routes` lists them for tools that look there (the compose healthcheck test does).
    app.router.routes.extend(health.router.routes)
    for module in (scheduler, scanners, hosts, operations, commands, workers, audit):
        app.include_router(module.router)
    # Generic schedules are listed in the OpenAPI document (JOBS_IN_OPENAPI), so the role
    # matrix of tests/integration/test_api.py, which covers every documented operation, holds
    # them too.
    app.include_router(jobs.router, include_in_schema=JOBS_IN_OPENAPI)
    console.install(app)
    app.include_router(agents.router)  # The scanner agents' HTTP gateway (docs/agent.md).
    return app
