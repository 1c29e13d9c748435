"""Commands across the fleet: every command issued, filtered, newest first."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import AwareDatetime, BeforeValidator

from api import command_queries
from api.deps import AuthenticatedRoute, ConnDep, GuestDep
from api.errors import READ_ERRORS
from api.pagination import decode_cursor, split_page
from api.routes import PREFIX
from api.routes.hosts import NO_NUL, Cursor
from schemas.api import CommandsPublic, CommandState
from schemas.base import CommandReason

router = APIRouter(prefix=PREFIX, tags=["operations"], route_class=AuthenticatedRoute)

Name = Annotated[str | None, Query(max_length=255, pattern=NO_NUL)]
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:\d{2})")


def _rfc3339_only(value: Any) -> Any:
    """An instant comes as RFC 3339 text with an offset, as documented; not as a number of
    epoch seconds, which pydantic would otherwise take."""
    if isinstance(value, str) and not _RFC3339.fullmatch(value):
        raise ValueError(
            "expected an RFC 3339 instant with an offset, such as 2030-01-01T00:00:00Z"
        )
    return value


Instant = Annotated[AwareDatetime, BeforeValidator(_rfc3339_only)]


@router.get("/commands", response_model=CommandsPublic, responses=READ_ERRORS)
async def list_commands(
    conn: ConnDep,
    caller: GuestDep,
    host: Name = None,
    scanner: Name = None,
    schedule: Annotated[
        str | None,
        Query(max_length=255, pattern=NO_NUL, description="A schedule id."),
    ] = None,
    run: Annotated[
        Instant | None,
        Query(
            description="The schedule occurrence (run) the commands were issued for: with "
            "`schedule`, that schedule's run; alone, every schedule's run at that instant."
        ),
    ] = None,
    organization: Name = None,
    reason: CommandReason | None = None,
    state: Annotated[
        CommandState | None,
        Query(description="in_flight, or how it ended: succeeded, failed, timed_out."),
    ] = None,
    issued_from: Annotated[
        Instant | None, Query(description="Issued at or after this instant.")
    ] = None,
    issued_until: Annotated[
        Instant | None,
        Query(
            description="Issued before this instant; a range that ends before it starts "
            "matches nothing."
        ),
    ] = None,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> CommandsPublic:
    """Scan commands matching every filter given, newest issued first, each with its
    lifecycle: issued, then a result (`outcome` completed or failed) or its deadline passing
    (timed_out), and when."""
    filters = command_queries.CommandFilters(
        host_id=host,
        scanner=scanner,
        schedule_id=schedule,
        occurrence=run,
        organization=organization,
        reason=reason,
        state=state,
        issued_from=issued_from,
        issued_until=issued_until,
    )
    rows, count = await command_queries.list_commands(
        conn,
        filters=filters,
        after=decode_cursor(cursor, shape=(datetime, str)),
        limit=limit + 1,
    )
    page, next_cursor = split_page(rows, limit, command_queries.command_key)
    return CommandsPublic(data=page, count=count, next_cursor=next_cursor)
