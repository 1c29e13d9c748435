"""The global scheduler: its configuration, the on/off switch, status and initialisation."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse

from api import queries
from api.deps import AdminDep, AuthenticatedRoute, ClockDep, ConnDep, GuestDep, PublisherDep
from api.errors import READ_ERRORS, InvalidInput
from api.routes import PREFIX
from api.writes import EVENT_ID_HEADER, WaitDep, answer, stamp, write_answers
from schemas.api import (
    Accepted,
    ConfigUpdate,
    InitializeAccepted,
    SchedulerConfigPublic,
    StatusPublic,
)
from schemas.config import ConfigChanges
from schemas.events import ConfigUpdated, HostsInitializeRequested, SchedulerToggled

router = APIRouter(prefix=PREFIX, tags=["scheduler"], route_class=AuthenticatedRoute)


@router.get("/config", response_model=SchedulerConfigPublic, responses=READ_ERRORS)
async def get_config(conn: ConnDep, caller: GuestDep) -> SchedulerConfigPublic:
    """The current scheduler configuration (defaults, version 0, before any change)."""
    return await queries.get_config(conn)


@router.put(
    "/config",
    status_code=202,
    response_model=Accepted,
    responses=write_answers(SchedulerConfigPublic),
)
async def update_config(
    body: Annotated[ConfigUpdate, Body()],
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    wait: WaitDep,
) -> JSONResponse:
    """Change some config fields; each keeps the range of SchedulerConfig."""
    wanted = body.model_dump(exclude_unset=True)
    if not wanted:
        raise InvalidInput("body", "give at least one field to change", location="body")
    before = await queries.get_config(conn)
    changes = ConfigChanges(**wanted)
    receipt = await publisher.publish(ConfigUpdated(**stamp(caller, clock), changes=changes))
    return await answer(
        receipt,
        wait=wait,
        read=lambda: queries.get_config(conn),
        shows_change=lambda now: (
            now.version > before.version
            and all(getattr(now, name) == value for name, value in wanted.items())
        ),
    )


@router.post(
    "/toggle",
    status_code=202,
    response_model=Accepted,
    responses=write_answers(SchedulerConfigPublic),
)
async def toggle(
    enabled: Annotated[bool, Query(description="true resumes dispatch, false pauses it.")],
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    wait: WaitDep,
) -> JSONResponse:
    """Pause or resume dispatching scan commands."""
    before = await queries.get_config(conn)
    receipt = await publisher.publish(SchedulerToggled(**stamp(caller, clock), enabled=enabled))
    return await answer(
        receipt,
        wait=wait,
        read=lambda: queries.get_config(conn),
        shows_change=lambda now: now.version > before.version and now.enabled == enabled,
    )


@router.get("/status", response_model=StatusPublic, responses=READ_ERRORS)
async def status(
    conn: ConnDep,
    clock: ClockDep,
    caller: GuestDep,
    upcoming: Annotated[int, Query(ge=0, le=100, description="How many next hosts due.")] = 10,
) -> StatusPublic:
    """Counts by state, in flight, overdue, due within the hour, the next hosts due, lag."""
    return await queries.get_status(conn, now=clock.now(), upcoming=upcoming)


@router.post(
    "/initialize", status_code=202, response_model=InitializeAccepted, responses=write_answers()
)
async def initialize(
    conn: ConnDep, publisher: PublisherDep, clock: ClockDep, caller: AdminDep
) -> JSONResponse:
    """Make every known host never scanned successfully (and with no command in flight) due
    now; `hosts` says how many the read model shows at this moment."""
    hosts = await queries.count_hosts_to_initialize(conn)
    receipt = await publisher.publish(HostsInitializeRequested(**stamp(caller, clock)))
    body = InitializeAccepted(event_id=receipt.event_id, hosts=hosts)
    return JSONResponse(
        body.model_dump(mode="json"),
        status_code=202,
        headers={EVENT_ID_HEADER: str(receipt.event_id)},
    )
