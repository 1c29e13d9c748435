"""The global scheduler: its configuration, the on/off switch, status and initialisation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Body, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from api import queries
from api.deps import AdminDep, AuthenticatedRoute, ClockDep, ConnDep, GuestDep, PublisherDep
from api.errors import READ_ERRORS, InvalidInput
from api.routes import PREFIX
from api.writes import EVENT_ID_HEADER, WaitDep, answer, stamp, write_answers
from kairos.floor.forecast import forecast
from schemas.api import (
    Accepted,
    ConfigUpdate,
    InitializeAccepted,
    SchedulerConfigPublic,
    StatusPublic,
)
from schemas.changes import ConfigUpdated, HostsInitializeRequested, SchedulerToggled
from schemas.config import ConfigChanges

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


# --- forecast -------------------------------------------------------------------------------


class HourLoadPublic(BaseModel):
    model_config = ConfigDict(frozen=True)
    start: datetime
    due: int = Field(description="Commands that come due in this hour.")
    adaptive_due: int
    scheduled_due: int = Field(description="Commands of generic schedules due in this hour.")
    capacity: int = Field(description="Scans the cap completes in an hour at the p50 duration.")
    capacity_p90: int = Field(description="The same at the p90 duration.")
    started: int = Field(description="Scans the forecast starts in this hour.")
    backlog: int = Field(description="Commands due by the hour's end and not started.")


class PromiseMissPublic(BaseModel):
    model_config = ConfigDict(frozen=True)
    host_id: str
    deadline: datetime = Field(description="Last scan + the promise (or its interval if longer).")
    starts_at: datetime | None = Field(description="Forecast start; null: not in the horizon.")


class ForecastPublic(BaseModel):
    model_config = ConfigDict(frozen=True)
    start: datetime
    hours: int
    max_concurrent_scans: int
    scan_seconds_p50: float
    scan_seconds_p90: float
    measured_scans: int = Field(description="Results the durations come from (0: 300 s assumed).")
    promise_hours: float = Field(description="max_interval_minutes, in hours (48 by default).")
    promise_kept: bool = Field(description="False: some host would be scanned too late.")
    hourly: list[HourLoadPublic]
    misses: list[PromiseMissPublic]


@router.get("/forecast", response_model=ForecastPublic, responses=READ_ERRORS)
async def get_forecast(
    conn: ConnDep,
    clock: ClockDep,
    caller: GuestDep,
    hours: Annotated[int, Query(ge=1, le=168)] = 48,
) -> ForecastPublic:
    """Will the cap keep the 48 h promise? Load per hour and the hosts that would miss it."""
    now = clock.now().astimezone(UTC)
    inputs = await queries.forecast_inputs(conn, now=now, hours=hours)
    result = forecast(now=now, hours=hours, **inputs)
    return ForecastPublic(
        **{k: v for k, v in vars(result).items() if k not in ("hourly", "misses")},
        promise_hours=inputs["promise"] / timedelta(hours=1),
        promise_kept=result.promise_kept,
        hourly=[HourLoadPublic(**vars(hour), due=hour.due) for hour in result.hourly],
        misses=[PromiseMissPublic(**vars(miss)) for miss in result.misses],
    )
