"""Operations: what happened to a command, what Kairos could not accept, and its alerts."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query

from api import queries
from api.deps import AdminDep, AuthenticatedRoute, ConnDep, GuestDep
from api.errors import NOT_FOUND, READ_ERRORS, CommandNotFound
from api.pagination import decode_cursor, split_page
from api.routes import PREFIX
from api.routes.hosts import NO_NUL, Cursor
from schemas.alerts import AlertState, AlertType
from schemas.api import AlertsPublic, CommandDetailPublic, DeadLettersPublic

router = APIRouter(prefix=PREFIX, tags=["operations"], route_class=AuthenticatedRoute)


@router.get(
    "/commands/{command_id}",
    response_model=CommandDetailPublic,
    responses={**READ_ERRORS, **NOT_FOUND},
)
async def get_command(
    command_id: Annotated[str, Path(min_length=1, max_length=255, pattern=NO_NUL)],
    conn: ConnDep,
    caller: GuestDep,
) -> CommandDetailPublic:
    """A scan command, its outcome, and the results received for it."""
    command = await queries.get_command(conn, command_id=command_id)
    if command is None:
        raise CommandNotFound(f"command {command_id!r} is not in the read model")
    return command


@router.get("/dead-letters", response_model=DeadLettersPublic, responses=READ_ERRORS)
async def dead_letters(
    conn: ConnDep,
    caller: AdminDep,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> DeadLettersPublic:
    """Messages Kairos could not accept, newest first."""
    after = decode_cursor(cursor, shape=(datetime, str))
    rows, count = await queries.list_dead_letters(conn, after=after, limit=limit + 1)
    letters, next_cursor = split_page(rows, limit, queries.dead_letter_key)
    return DeadLettersPublic(data=letters, count=count, next_cursor=next_cursor)


@router.get("/alerts", response_model=AlertsPublic, responses=READ_ERRORS)
async def list_alerts(
    conn: ConnDep,
    caller: GuestDep,
    state: Annotated[
        AlertState | None, Query(description="firing or resolved; both when absent.")
    ] = None,
    alert_type: Annotated[AlertType | None, Query(alias="type")] = None,
    subject: Annotated[
        str | None,
        Query(min_length=1, max_length=255, pattern=NO_NUL, description="A host or schedule id."),
    ] = None,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> AlertsPublic:
    """Alerts newest first: a score that dropped, a host that became critical or is past the
    48 h promise, a schedule that disabled itself, the cap saturated too long."""
    after = decode_cursor(cursor, shape=(datetime, str))
    rows, count, firing = await queries.list_alerts(
        conn, state=state, alert_type=alert_type, subject_id=subject, after=after, limit=limit + 1
    )
    page, next_cursor = split_page(rows, limit, queries.alert_key)
    return AlertsPublic(data=page, count=count, firing=firing, next_cursor=next_cursor)
