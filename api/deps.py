"""Request dependencies as `Annotated` aliases: connection, publisher, clock, caller, roles."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from api import queries, tokens
from api.errors import Forbidden, InvalidInput, Unauthenticated
from api.publisher import Publisher
from kairos.clock import Clock
from kairos.db import DatabaseUnavailable, redact
from kairos.settings import Settings
from schemas.api import Role


@dataclass(frozen=True)
class Runtime:
    """What the lifespan opens once and every request shares."""

    settings: Settings
    clock: Clock
    pool: AsyncConnectionPool
    publisher: Publisher
    timeout: float
    wait_seconds: float


@dataclass(frozen=True)
class Caller:
    """Who is calling: the token's name (the events' `actor`) and its role."""

    name: str
    role: Role


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(_runtime)]


async def _connection(runtime: RuntimeDep) -> AsyncIterator[psycopg.AsyncConnection]:
    try:
        async with runtime.pool.connection(timeout=runtime.timeout) as conn:
            yield conn
    except PoolTimeout:
        raise DatabaseUnavailable(
            f"PostgreSQL is not reachable at {redact(runtime.settings.database_url)} "
            f"(no connection within {runtime.timeout:g}s)"
        ) from None


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


async def _caller(
    conn: ConnDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthenticated("a bearer token is required (Authorization: Bearer <token>)")
    async with queries.driver_errors():
        found = await tokens.caller_of(conn, credentials.credentials)
    if found is None:
        raise Unauthenticated("the bearer token is unknown or revoked")
    name, role = found
    return Caller(name=name, role=role)


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
