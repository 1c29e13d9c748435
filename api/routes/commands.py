"""Commands across the fleet: every command issued, filtered, newest first."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import AwareDatetime

from api import command_queries
from api.deps import AuthenticatedRoute, ConnDep, GuestDep
from api.errors import READ_ERRORS, InvalidInput
from api.pagination import decode_cursor, split_page
from api.routes import PREFIX
from api.routes.hosts import NO_NUL, Cursor
from schemas.api import CommandsPublic, CommandState
from schemas.base import CommandReason

router = APIRouter(prefix=PREFIX, tags=["operations"], route_class=AuthenticatedRoute)

Name = Annotated[str | None, Query(min_length=1, max_length=255, pattern=NO_NUL)]


@router.get("/commands", response_model=CommandsPublic, responses=READ_ERRORS)
async def list_commands(
    conn: ConnDep,
    caller: GuestDep,
    host: Name = None,
    scanner: Name = None,
    schedule: Annotated[
        str | None,
        Query(min_length=1, max_length=255, pattern=NO_NUL, description="A schedule id."),
    ] = None,
    run: Annotated[
        AwareDatetime | None,
        Query(
            description="The schedule occurrence (run) the commands were issued for; "
            "needs `schedule`."
        ),
    ] = None,
    organization: Name = None,
    reason: CommandReason | None = None,
    state: Annotated[
        CommandState | None,
        Query(description="in_flight, or how it ended: succeeded, failed, timed_out."),
    ] = None,
    issued_from: Annotated[
        AwareDatetime | None, Query(description="Issued at or after this instant.")
    ] = None,
    issued_until: Annotated[
        AwareDatetime | None, Query(description="Issued before this instant.")
    ] = None,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> CommandsPublic:
    """Scan commands matching every filter given, newest issued first, each with its
    lifecycle: issued, then a result (`outcome` completed or failed) or its deadline passing
    (timed_out), and when."""
    if run is not None and schedule is None:
        raise InvalidInput("run", "a run is an occurrence of one schedule: give `schedule` too")
    if issued_from is not None and issued_until is not None and issued_until <= issued_from:
        raise InvalidInput("issued_until", "must be later than issued_from")
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
