"""Request dependencies as `Annotated` aliases: connection, publisher, clock, caller, roles.

Authentication is not an ordinary dependency: FastAPI reads and parses a body before it
resolves dependencies, so `AuthenticatedRoute` checks the bearer token first, before the
body is read and before any pooled connection is taken; `CallerDep` then hands on the result.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Annotated, Any

import psycopg
from fastapi import Depends, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from api import queries, tokens
from api.errors import Forbidden, InvalidInput, Unauthenticated
from api.probes import SharedProbe
from api.publisher import Publisher
from kairos.floor.clock import Clock
from kairos.floor.db import DatabaseUnavailable, redact
from kairos.floor.settings import Settings
from schemas.api import Role

FORECAST_PROBE_SECONDS = 60.0


@dataclass(frozen=True)
class Runtime:
    """What the lifespan opens once and every request shares."""

    settings: Settings
    clock: Clock
    pool: AsyncConnectionPool
    publisher: Publisher
    timeout: float
    wait_seconds: float
    token_verifier: tokens.TokenVerifier
    readiness: SharedProbe[tuple[str, str]] = field(default_factory=SharedProbe)
    """(kafka, database) states for `/readyz`, checked at most once a second."""
    read_model_figures: SharedProbe[tuple[float | None, int | None, int]] = field(
        default_factory=SharedProbe
    )
    """(projection lag, backlog, read model up) for `/metrics`, read at most once a second."""
    forecast_figures: SharedProbe[tuple[int, int] | None] = field(
        default_factory=lambda: SharedProbe(FORECAST_PROBE_SECONDS)
    )
    """(promise kept 1/0, hosts that would miss it) over the next 48 h, for `/metrics`: the
    forecast reads every scannable host, so a scrape computes it at most once a minute."""


@dataclass(frozen=True)
class Caller:
    """Who is calling: the token's name (the events' `actor`) and its role."""

    name: str
    role: Role


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(_runtime)]


def _pool_timeout(runtime: Runtime) -> DatabaseUnavailable:
    return DatabaseUnavailable(
        f"PostgreSQL is not reachable at {redact(runtime.settings.database_url)} "
        f"(no connection within {runtime.timeout:g}s)"
    )


async def _connection(runtime: RuntimeDep) -> AsyncIterator[psycopg.AsyncConnection]:
    try:
        async with runtime.pool.connection(timeout=runtime.timeout) as conn:
            yield conn
    except PoolTimeout:
        raise _pool_timeout(runtime) from None


ConnDep = Annotated[psycopg.AsyncConnection, Depends(_connection)]


def _publisher(runtime: RuntimeDep) -> Publisher:
    return runtime.publisher


PublisherDep = Annotated[Publisher, Depends(_publisher)]


def _clock(runtime: RuntimeDep) -> Clock:
    return runtime.clock


ClockDep = Annotated[Clock, Depends(_clock)]

bearer = HTTPBearer(
    auto_error=False,
    description="A token from `kairos token create --role ROLE`, sent as `Bearer <token>`.",
)


async def authenticate(request: Request) -> Caller:
    """The caller named by the request's bearer token, or Unauthenticated.

    Touches the database only for a token signed with this deployment's secret and not
    looked up within `KAIROS_API_TOKEN_CACHE_SECONDS` (see `api.tokens`).
    """
    runtime = _runtime(request)
    scheme, token = get_authorization_scheme_param(request.headers.get("Authorization"))
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("a bearer token is required (Authorization: Bearer <token>)")

    async def lookup(value: str) -> tokens.TokenRecord | None:
        try:
            async with runtime.pool.connection(timeout=runtime.timeout) as conn:
                async with queries.driver_errors():
                    return await tokens.lookup(conn, value)
        except PoolTimeout:
            raise _pool_timeout(runtime) from None

    try:
        record = await runtime.token_verifier.verify(token, lookup)
    except tokens.TokenRefused as refused:
        raise Unauthenticated(str(refused)) from None
    return Caller(name=record.name, role=record.role)


async def _caller(
    request: Request,
    # Declares the bearer scheme in the OpenAPI document; the check is `authenticate`.
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    caller = getattr(request.state, "caller", None)
    if not isinstance(caller, Caller):  # A route built without AuthenticatedRoute.
        caller = await authenticate(request)
    return caller


def _needs_caller(dependant: Dependant) -> bool:
    return any(sub.call is _caller or _needs_caller(sub) for sub in dependant.dependencies)


class AuthenticatedRoute(APIRoute):
    """A route that authenticates its caller before its body is read or any dependency runs,
    when it needs a caller at all (its dependencies include `CallerDep`)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if not _needs_caller(self.dependant):
            return handler

        async def authenticated(request: Request) -> Response:
            request.state.caller = await authenticate(request)
            return await handler(request)

        return authenticated


CallerDep = Annotated[Caller, Depends(_caller)]


def _at_least(minimum: Role) -> Callable[[Caller], Coroutine[Any, Any, Caller]]:
    async def check(caller: CallerDep) -> Caller:
        if caller.role < minimum:
            raise Forbidden(
                f"this needs the {minimum.name} role or higher; "
                f"the token {caller.name!r} has {caller.role.name}"
            )
        return caller

    check.__name__ = f"at_least_{minimum.name.lower()}"
    return check


async def _agent(caller: CallerDep) -> Caller:
    """Scanner agents' routes take AGENT tokens only (and AGENT tokens nothing else, being
    below GUEST): an agent's credential cannot read the fleet, an operator's cannot report."""
    if caller.role is not Role.AGENT:
        raise Forbidden(
            f"this needs an AGENT token (kairos token create --role AGENT); "
            f"the token {caller.name!r} has {caller.role.name}"
        )
    return caller


AgentDep = Annotated[Caller, Depends(_agent)]
GuestDep = Annotated[Caller, Depends(_at_least(Role.GUEST))]
AnalystDep = Annotated[Caller, Depends(_at_least(Role.SECURITY_ANALYST))]
AdminDep = Annotated[Caller, Depends(_at_least(Role.SECURITY_ADMIN))]


def _query_names(dependant: Dependant) -> set[str]:
    names = {field.alias for field in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def reject_unknown_query(request: Request) -> None:
    """422 for a query parameter the operation does not take: `?limt=5` or `?orgnization=x`
    would otherwise be ignored silently and answer something the caller did not ask for."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    unknown = sorted(set(request.query_params) - _query_names(dependant))
    if unknown:
        raise InvalidInput(unknown[0], "unknown query parameter")
