"""The audit trail: who changed what, and when."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from api import audit_queries
from api.deps import AnalystDep, AuthenticatedRoute, ConnDep
from api.errors import READ_ERRORS
from api.pagination import decode_cursor, split_page
from api.routes import PREFIX
from api.routes.commands import Instant
from api.routes.hosts import NO_NUL, Cursor
from schemas.audit import AuditPublic

router = APIRouter(prefix=PREFIX, tags=["audit"], route_class=AuthenticatedRoute)


@router.get("/audit", response_model=AuditPublic, responses=READ_ERRORS)
async def list_audit(
    conn: ConnDep,
    caller: AnalystDep,
    actor: Annotated[
        str | None,
        Query(min_length=1, max_length=255, pattern=NO_NUL, description="A token name."),
    ] = None,
    change_type: Annotated[
        str | None,
        Query(
            alias="type",
            min_length=1,
            max_length=64,
            pattern=NO_NUL,
            description="A change type: `schedule.paused`, `host.created`, `token.revoked`, …",
        ),
    ] = None,
    subject: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=255,
            pattern=NO_NUL,
            description="A host id, a schedule name, a scanner, a token name, or `config`.",
        ),
    ] = None,
    since: Annotated[
        Instant | None, Query(description="From this instant (included), RFC 3339.")
    ] = None,
    until: Annotated[Instant | None, Query(description="Before this instant, RFC 3339.")] = None,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> AuditPublic:
    """Changes newest first: schedules, hosts, config, scanners, tokens, redrives, each with
    the token that made it. SECURITY_ANALYST and above."""
    after = decode_cursor(cursor, shape=(datetime, str))
    rows, count = await audit_queries.list_audit(
        conn,
        actor=actor,
        change_type=change_type,
        subject=subject,
        since=since,
        until=until,
        after=after,
        limit=limit + 1,
    )
    page, next_cursor = split_page(rows, limit, audit_queries.audit_key)
    return AuditPublic(data=page, count=count, next_cursor=next_cursor)
