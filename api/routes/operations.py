"""Operations: what happened to a command, what Kairos could not accept, and its alerts."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, HTTPException, Path, Query
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from api import audit_queries, queries
from api.deps import (
    AdminDep,
    AuthenticatedRoute,
    ClockDep,
    ConnDep,
    GuestDep,
    PublisherDep,
    RuntimeDep,
)
from api.errors import NOT_FOUND, READ_ERRORS, WRITE_ERRORS, CommandNotFound, error_answer
from api.pagination import decode_cursor, split_page
from api.routes import PREFIX
from api.routes.hosts import NO_NUL, Cursor
from schemas.alerts import AlertState, AlertType
from schemas.api import AlertsPublic, CommandDetailPublic, DeadLettersPublic
from schemas.audit import RedrivePublic, RedriveRequest
from schemas.changes import ScheduleChange
from schemas.objects import ObjectEvent
from schemas.results import ScanCompleted

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


RAW_KEPT_CHARS = 10_000
"""A dead letter keeps this much of the original value (streams.codec.RAW_KEPT_CHARS)."""


def _contracts(runtime: RuntimeDep) -> dict[str, TypeAdapter[Any]]:
    """The contract of each topic a dead letter may be sent back to."""
    topics = runtime.settings.topics
    return {
        topics.object_created: TypeAdapter(ObjectEvent),
        topics.scan_completed: TypeAdapter(ScanCompleted),
        topics.schedule_changes: TypeAdapter(ScheduleChange),
    }


@router.post(
    "/dead-letters/{event_id}/redrive",
    response_model=RedrivePublic,
    responses={
        **WRITE_ERRORS,
        **NOT_FOUND,
        409: error_answer("Redriven already (force=true sends it again)."),
    },
)
async def redrive_dead_letter(
    event_id: UUID,
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    runtime: RuntimeDep,
    caller: AdminDep,
    redrive: Annotated[RedriveRequest | None, Body()] = None,
    force: Annotated[
        bool, Query(description="Send it again even if it was redriven before.")
    ] = False,
) -> RedrivePublic:
    """Send a dead letter back to its source topic with its original key: unchanged, or as
    the corrected `body` given, which must satisfy the topic's contract first. Recorded on
    the dead letter and in the audit trail (`dead_letter.redriven`)."""
    # The letter's row stays locked until the redrive is recorded: a second redrive waits,
    # then sees the first and is refused unless forced.
    async with conn.transaction():
        letter = await audit_queries.get_dead_letter(conn, event_id, lock=True)
        if letter is None:
            raise HTTPException(404, f"dead letter {event_id} is not in the read model")
        if letter.redriven_at is not None and not force:
            raise HTTPException(
                409,
                f"dead letter {event_id} was redriven at {letter.redriven_at.isoformat()} by "
                f"{letter.redriven_by}; force=true sends it again",
            )
        contract = _contracts(runtime).get(letter.source_topic)
        if contract is None:
            raise HTTPException(409, f"{letter.source_topic} takes no redriven messages")
        body = redrive.body if redrive is not None else None
        if body is None:
            if len(letter.raw) >= RAW_KEPT_CHARS:
                raise RequestValidationError(
                    [
                        {
                            "loc": ("body", "body"),
                            "msg": "the original was cut; give a body",
                            "type": "missing",
                        }
                    ]
                )
            value = letter.raw.encode()
            new_id = _event_id_of(letter.raw)
        else:
            try:
                message = contract.validate_python(body)
            except ValidationError as error:
                raise RequestValidationError(
                    [{**e, "loc": ("body", "body", *e["loc"])} for e in error.errors()]
                ) from None
            value = json.dumps(body, separators=(",", ":")).encode()
            new_id = str(message.event_id)
        partition, offset = await publisher.republish(letter.source_topic, value, letter.key)
        redriven_at = clock.now()
        new_id = new_id or f"{letter.source_topic}/{partition}/{offset}"
        await audit_queries.mark_redriven(
            conn,
            event_id=event_id,
            at=redriven_at,
            actor=caller.name[:255],
            redrive_event_id=new_id,
            summary={"topic": letter.source_topic, "edited": body is not None, "event_id": new_id},
        )
    return RedrivePublic(
        event_id=event_id,
        topic=letter.source_topic,
        key=letter.key,
        partition=partition,
        offset=offset,
        redrive_event_id=new_id,
        redriven_at=redriven_at,
        redriven_by=caller.name[:255],
    )


def _event_id_of(raw: str) -> str | None:
    """The event id an undecodable original may still carry."""
    try:
        found = json.loads(raw).get("event_id")
    except (ValueError, AttributeError):
        return None
    return str(found)[:255] if found is not None else None


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
