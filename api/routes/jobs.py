"""Generic schedules ("scheduled jobs"): list, create, change, pause, trigger, history.

Reads come from the read model (`schedules`, `schedule_runs`); every change is published as
a `schedule.*` event keyed by the schedule id, answered 202 + event id. The schedule's name
is its id, so names are unique by construction (and by a unique index in the projection).

Optimistic concurrency: GET /{name} answers an `ETag` naming the schedule's incarnation and
version; PATCH and DELETE with `If-Match` answer 412 when the schedule has changed since.
System schedules (`is_system`) are created, changed, paused, resumed, enabled, disabled and
deleted by SUPER_ADMIN only.

Recurrences are checked for meaning here with `kairos.floor.recurrence.schedule_problem`
(kairos.floor.cron and dateutil; `schemas` may only use pydantic and the standard library, so the
check cannot live there). That module is calendar arithmetic shared by the API and the
worker, outside both rooms, so they refuse the same schedules with the same words.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, HTTPException, Path, Query
from fastapi.responses import JSONResponse, Response
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
)

from api import audit_queries, queries
from api.deps import AdminDep, AuthenticatedRoute, ClockDep, ConnDep, GuestDep, PublisherDep
from api.errors import READ_ERRORS, Forbidden, InvalidInput, error_response
from api.writes import EVENT_ID_HEADER, POLL_SECONDS, WaitDep, accepted, stamp, write_answers
from kairos.floor.recurrence import next_occurrences, schedule_problem
from schemas.api import ErrorPublic, FieldErrorPublic, Role
from schemas.schedules import (
    OverlapPolicy,
    Schedule,
    ScheduleBackfillRequested,
    ScheduleDeleted,
    ScheduleDisabled,
    ScheduleEnabled,
    SchedulePaused,
    ScheduleResumed,
    ScheduleTriggered,
    ScheduleUpserted,
)

PREFIX = "/api/scheduled-jobs"
router = APIRouter(prefix=PREFIX, tags=["scheduled-jobs"], route_class=AuthenticatedRoute)

Name = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")]
NOT_FOUND = {
    404: {"model": ErrorPublic, "description": "No such schedule."},
    409: {"model": ErrorPublic, "description": "The schedule exists already or is protected."},
}
PRECONDITION = {
    412: {"model": ErrorPublic, "description": "If-Match names another version of the schedule."}
}
IfMatch = Annotated[
    str | None,
    Header(description="The ETag of GET /{name}: refuse (412) if the schedule changed since."),
]


def _rfc3339_only(value: Any) -> Any:
    """A timestamp comes as RFC 3339 text, as documented; not as a number of epoch seconds,
    which pydantic would otherwise take."""
    if value is not None and not isinstance(value, str | datetime):
        raise ValueError("expected an RFC 3339 timestamp such as '2030-01-01T00:00:00Z'")
    return value


TIMESTAMP_FIELDS = ("start_at", "end_at")


def _definition_fields(*, partial: bool) -> dict[str, Any]:
    """Schedule's own fields (types, ranges, descriptions) for a request body: `name` stands
    for the id; in a partial body every field may be left out and none has a default."""
    fields: dict[str, Any] = {}
    for name, info in Schedule.model_fields.items():
        if name == "id":
            continue
        field = copy.copy(Schedule.model_fields["id"] if name == "name" else info)
        if name == "name":
            field.description = "Unique; the schedule's id in paths and events."
        if partial:
            field.default, field.default_factory = None, None
        annotation: Any = info.annotation
        if name in TIMESTAMP_FIELDS:
            annotation = Annotated[annotation, BeforeValidator(_rfc3339_only)]
        fields[name] = (annotation, field)
    return fields


def _no_defaults(schema: dict[str, Any]) -> None:
    for prop in schema.get("properties", {}).values():
        prop.pop("default", None)


ScheduledJobCreate: type[BaseModel] = create_model(
    "ScheduledJobCreate",
    __config__=ConfigDict(extra="forbid", title="ScheduledJobCreate"),
    __doc__="A new schedule: `Schedule` (schemas/schedules.py) with `name` as its id.",
    **_definition_fields(partial=False),
)
ScheduledJobUpdate: type[BaseModel] = create_model(
    "ScheduledJobUpdate",
    __config__=ConfigDict(
        extra="forbid", title="ScheduledJobUpdate", json_schema_extra=_no_defaults
    ),
    __doc__="Fields of a schedule to change; those left out keep their value. "
    "The name cannot change.",
    **_definition_fields(partial=True),
)
CRON_EXAMPLE = {
    "name": "nightly-web",
    "scanner": "nmap",
    "recurrence": {"kind": "cron", "expression": "0 3 * * 1-5"},
    "timezone": "Europe/Amsterdam",
}
SCHEDULE_EXAMPLES: dict[str, dict[str, Any]] = {
    "cron": {
        "summary": "Cron: 03:00 on weekdays, Amsterdam time",
        "value": CRON_EXAMPLE,
    },
    "interval": {
        "summary": "Interval: every 6 hours of elapsed time",
        "value": {
            "name": "ports-6h",
            "scanner": "nmap",
            "recurrence": {"kind": "interval", "hours": 6},
            "jitter_seconds": 300,
        },
    },
    "rrule": {
        "summary": "RRULE: the last weekday of every month at 22:30",
        "value": {
            "name": "month-end-audit",
            "scanner": "compliance",
            "recurrence": {
                "kind": "rrule",
                "rule": "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=22;BYMINUTE=30",
            },
            "timezone": "America/New_York",
        },
    },
    "filter": {
        "summary": "Filter: production web hosts that are not compliant",
        "value": {
            "name": "prod-web-daily",
            "scanner": "nmap",
            "recurrence": {"kind": "cron", "expression": "30 1 * * *"},
            "targets": {
                "filter": {
                    "all": [
                        {"field": "labels.env", "op": "eq", "value": "prod"},
                        {"field": "hostname", "op": "glob", "value": "web-*"},
                        {"field": "state", "op": "ne", "value": "compliant"},
                    ]
                }
            },
        },
    },
    "trigger": {
        "summary": "Trigger: scan every host when it is created",
        "value": {
            "name": "onboarding-scan",
            "scanner": "nmap",
            "recurrence": {"kind": "none"},
            "trigger": {"run_on": "host", "operation": "created"},
        },
    },
}
UPDATE_EXAMPLES: dict[str, dict[str, Any]] = {
    "priority": {"summary": "Raise the priority", "value": {"priority": 8}},
    "recurrence": {
        "summary": "Move to 04:15 every day",
        "value": {"recurrence": {"kind": "cron", "expression": "15 4 * * *"}},
    },
}


class _Public(BaseModel):
    model_config = ConfigDict(frozen=True)


class ScheduledJobPublic(_Public):
    name: str
    status: str
    enabled: bool
    paused: bool
    pause_note: str | None = None
    disabled_reason: str | None = None
    is_system: bool
    next_fire_at: datetime | None = None
    last_fired_at: datetime | None = None
    last_success_at: datetime | None = None
    runs: int
    skipped_runs: int
    succeeded_runs: int = 0
    partially_failed_runs: int = 0
    failed_runs: int
    dropped_occurrences: dict[str, int] = Field(
        default_factory=dict,
        description="Occurrences that did not run, by reason: overlap (Temporal's "
        "num_actions_skipped_overlap), missed (past the catch-up window), coalesced, excluded "
        "(blackout), max_runs, already_running.",
    )
    consecutive_failures: int
    last_error: str | None = None
    version: int
    definition: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class ScheduledJobsPublic(_Public):
    data: list[ScheduledJobPublic]
    count: int


class ScheduleRunPublic(_Public):
    occurrence: datetime
    attempt: int
    reason: str
    fired_at: datetime
    outcome: str = Field(
        description="fired (commands out, not all ended), skipped, succeeded, "
        "partially_failed, failed, or dropped (an occurrence that did not run)."
    )
    error: str | None = None
    hosts_matched: int
    commands_issued: int
    commands_succeeded: int = 0
    commands_failed: int = 0
    skip_reason: str | None = None
    skipped_hosts: dict[str, int] = Field(default_factory=dict)


class RunStatsPublic(_Public):
    total: int
    fired: int = Field(description="Runs whose commands are out and not all ended yet.")
    skipped: int
    succeeded: int = 0
    partially_failed: int = 0
    failed: int
    dropped: int = 0
    success_rate: float | None = Field(
        description="succeeded / ended runs (succeeded + partially_failed + failed); runs "
        "still in flight, skipped runs and dropped occurrences are not counted."
    )


class RefusedChangePublic(_Public):
    """A change of this schedule the worker refused: based on a version it had moved past
    (a stale If-Match), or a create of a name that existed."""

    event_id: str
    type: str | None
    actor: str | None
    reason: str
    refused_at: datetime


class ScheduledJobDetailPublic(ScheduledJobPublic):
    next_fire_times: list[datetime]
    recent_runs: list[ScheduleRunPublic]
    refused_changes: list[RefusedChangePublic] = Field(
        default_factory=list, description="The latest changes the worker refused, newest first."
    )
    created_by: str | None = Field(
        default=None, description="The token that created the schedule (the audit trail)."
    )
    updated_by: str | None = Field(
        default=None, description="The token behind its latest change (the audit trail)."
    )


class ScheduleHistoryPublic(_Public):
    data: list[ScheduleRunPublic]
    count: int
    stats: RunStatsPublic


class PauseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: str | None = Field(default=None, max_length=500)


class BackfillBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: datetime
    end: datetime
    overlap: OverlapPolicy | None = Field(
        default=None,
        description="For this backfill while runs are in flight: skip drops it, buffer_one "
        "keeps its latest occurrence, allow (or none) queues them all.",
    )


class TriggerBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    overlap: OverlapPolicy | None = Field(
        default=None, description="The overlap policy for this run; none: the schedule's."
    )


_HIDDEN = ("schedule_id", "incarnation")


def _job(row: dict[str, Any]) -> ScheduledJobPublic:
    return ScheduledJobPublic.model_validate({k: v for k, v in row.items() if k not in _HIDDEN})


def etag(row: dict[str, Any]) -> str:
    """The schedule's incarnation and version: a schedule created again never repeats one."""
    return f'"{row["incarnation"] or "0"}.{row["version"]}"'


def _check_version(row: dict[str, Any], if_match: str | None) -> None:
    if if_match is None or if_match.strip() == "*":
        return
    wanted = {tag.strip().removeprefix("W/") for tag in if_match.split(",")}
    if etag(row) not in wanted:
        raise HTTPException(412, f"the schedule has changed (now {etag(row)}); GET it again")


def _guard_system(caller: Any, *, is_system: bool, action: str) -> None:
    if is_system and caller.role < Role.SUPER_ADMIN:
        raise Forbidden(f"{action} a system schedule needs the SUPER_ADMIN role")


def _validated(definition: dict[str, Any]) -> Schedule | JSONResponse:
    """The schedule `definition` describes, or the 422 naming what is wrong with it."""
    name = definition.get("name")
    try:
        schedule = Schedule.model_validate({**definition, "id": name})
    except ValidationError as error:
        fields = []
        for item in error.errors(include_url=False):
            where = ".".join(str(part) for part in item["loc"]) or "body"
            fields.append(("name" if where == "id" else where, str(item["msg"])))
        detail = "; ".join(f"{field}: {message}" for field, message in fields)
        return error_response(422, detail, errors=[_field(f, m) for f, m in fields])
    problem = schedule_problem(schedule)
    if problem:
        raise InvalidInput("recurrence", problem, location="body")
    return schedule


async def _check_scanner(conn: Any, scanner: str) -> None:
    """422 naming `scanner` unless the registry has it and it is active. A schedule whose
    scanner is deactivated later stays: the dispatcher holds its commands until it is back."""
    spec = (await queries.get_config(conn)).scanner(scanner)
    if spec is None:
        raise InvalidInput(
            "scanner", f"no scanner named {scanner!r} is registered", location="body"
        )
    if not spec.is_active:
        raise InvalidInput("scanner", f"scanner {scanner!r} is inactive", location="body")


def _field(field: str, message: str) -> FieldErrorPublic:
    return FieldErrorPublic(field=field, location="body", message=message, type="value_error")


async def _existing(conn: Any, name: str) -> dict[str, Any]:
    row = await queries.get_schedule(conn, name=name)
    if row is None:
        raise HTTPException(404, f"no schedule named {name!r}")
    return row


@router.get("", response_model=ScheduledJobsPublic, responses=READ_ERRORS)
async def list_jobs(
    conn: ConnDep,
    caller: GuestDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> ScheduledJobsPublic:
    """Every schedule, by name."""
    rows, count = await queries.list_schedules(conn, limit=limit, offset=offset)
    return ScheduledJobsPublic(data=[_job(row) for row in rows], count=count)


@router.post(
    "",
    status_code=202,
    responses={**write_answers(ScheduledJobPublic), 409: NOT_FOUND[409]},
)
async def create_job(
    body: Annotated[ScheduledJobCreate, Body(openapi_examples=SCHEDULE_EXAMPLES)],
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    wait: WaitDep,
) -> JSONResponse:
    """Create a schedule (its name is its id). A bad cron, RRULE or filter answers 422.

    The worker refuses a create of a name that exists (two creates at once both pass the read
    model): with `?wait=true` the one refused answers 409."""
    schedule = _validated(body.model_dump(exclude_unset=True))
    if isinstance(schedule, JSONResponse):
        return schedule
    await _check_scanner(conn, schedule.scanner)
    _guard_system(caller, is_system=schedule.is_system, action="creating")
    if await queries.get_schedule(conn, name=schedule.name) is not None:
        raise HTTPException(409, f"a schedule named {schedule.name!r} exists; PATCH it")
    event = ScheduleUpserted(
        **stamp(caller, clock), schedule_id=schedule.id, schedule=schedule, create_only=True
    )
    receipt = await publisher.publish(event)
    created = str(event.event_id)
    return await _answer_write(
        conn, wait, event, receipt, lambda row: row is not None and row["incarnation"] == created
    )


async def _answer_write(
    conn: Any,
    wait: Any,
    event: ScheduleUpserted | ScheduleDeleted,
    receipt: Any,
    landed: Callable[[dict[str, Any] | None], bool],
) -> JSONResponse:
    """202 + event id; with `wait`, until the read model shows the change (200 and the
    schedule, or `{"deleted": true}`) or the worker's refusal of it (412 for a change based on
    a version it has moved past, 409 for a create of a name that exists), within 5 s."""
    if not wait.enabled:
        return accepted(receipt)
    headers = {EVENT_ID_HEADER: str(event.event_id)}
    deadline = time.monotonic() + wait.seconds
    while True:
        row = await queries.get_schedule(conn, name=event.schedule_id)
        if landed(row):
            body = _job(row).model_dump(mode="json") if row is not None else {"deleted": True}
            return JSONResponse(body, status_code=200, headers=headers)
        refused = await queries.refused_schedule_changes(
            conn, schedule_id=event.schedule_id, limit=1, event_id=str(event.event_id)
        )
        if refused:
            reason = refused[0]["error"]
            status = 409 if reason.startswith(queries.REFUSED_PREFIXES[1]) else 412
            return error_response(status, reason, headers=headers)
        if time.monotonic() >= deadline:
            return accepted(receipt)
        await asyncio.sleep(POLL_SECONDS)


def _expected(row: dict[str, Any], if_match: str | None) -> dict[str, Any]:
    """The version a change based on `row` must still find, when If-Match asked for one."""
    if if_match is None or if_match.strip() == "*":
        return {}
    return {"expected_version": row["version"], "expected_incarnation": row["incarnation"] or "0"}


@router.get(
    "/{name}", response_model=ScheduledJobDetailPublic, responses={**READ_ERRORS, **NOT_FOUND}
)
async def get_job(
    name: Name, conn: ConnDep, clock: ClockDep, caller: GuestDep, response: Response
) -> ScheduledJobDetailPublic:
    """One schedule: its definition, state, next 5 fire times and latest runs; ETag header."""
    row = await _existing(conn, name)
    response.headers["ETag"] = etag(row)
    upcoming: list[datetime] = []
    if row["enabled"] and not row["paused"]:
        schedule = Schedule.model_validate(row["definition"])
        now = clock.now().astimezone(UTC)
        upcoming = [
            o.fire_at for o in next_occurrences(schedule, now, count=5, runs_so_far=row["runs"])
        ]
    runs, _ = await queries.list_schedule_runs(
        conn, schedule_id=row["schedule_id"], incarnation=row["incarnation"], limit=10
    )
    refused = await queries.refused_schedule_changes(conn, schedule_id=row["schedule_id"])
    created_by, updated_by = await audit_queries.schedule_authors(conn, row["schedule_id"])
    return ScheduledJobDetailPublic(
        **_job(row).model_dump(),
        next_fire_times=upcoming,
        recent_runs=[ScheduleRunPublic.model_validate(run) for run in runs],
        refused_changes=[_refused(letter) for letter in refused],
        created_by=created_by,
        updated_by=updated_by,
    )


def _refused(letter: dict[str, Any]) -> RefusedChangePublic:
    try:
        change = json.loads(letter["raw"])
    except ValueError:
        change = {}
    return RefusedChangePublic(
        event_id=str(change.get("event_id", letter["event_id"])),
        type=change.get("type"),
        actor=change.get("actor"),
        reason=letter["error"],
        refused_at=letter["received_at"],
    )


@router.patch(
    "/{name}",
    status_code=202,
    responses={**write_answers(ScheduledJobPublic), **NOT_FOUND, **PRECONDITION},
)
async def update_job(
    name: Name,
    body: Annotated[ScheduledJobUpdate, Body(openapi_examples=UPDATE_EXAMPLES)],
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    wait: WaitDep,
    if_match: IfMatch = None,
) -> JSONResponse:
    """Change some fields of a schedule's definition; the name cannot change.

    With `If-Match`, the worker applies the change only to the version it names: of two
    changes based on the same version, the second is refused (412 with `?wait=true`)."""
    row = await _existing(conn, name)
    _check_version(row, if_match)
    _guard_system(caller, is_system=row["is_system"], action="changing")
    changes = body.model_dump(exclude_unset=True)
    if "name" in changes and changes["name"] != name:
        raise InvalidInput("name", "a schedule's name is its id and cannot change", location="body")
    definition = {key: value for key, value in row["definition"].items() if key != "id"}
    schedule = _validated({**definition, **changes, "name": name})
    if isinstance(schedule, JSONResponse):
        return schedule
    if "scanner" in changes:
        await _check_scanner(conn, schedule.scanner)
    _guard_system(caller, is_system=schedule.is_system, action="changing")
    event = ScheduleUpserted(
        **stamp(caller, clock),
        schedule_id=schedule.id,
        schedule=schedule,
        **_expected(row, if_match),
    )
    receipt = await publisher.publish(event)
    version = row["version"]
    return await _answer_write(
        conn,
        wait,
        event,
        receipt,
        lambda now: (
            now is not None
            and now["version"] > version
            and Schedule.model_validate(now["definition"]) == schedule
        ),
    )


@router.delete(
    "/{name}", status_code=202, responses={**write_answers(), **NOT_FOUND, **PRECONDITION}
)
async def delete_job(
    name: Name,
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    wait: WaitDep,
    if_match: IfMatch = None,
) -> JSONResponse:
    """Delete a schedule (its run history goes with it); a system schedule needs SUPER_ADMIN.

    With `If-Match`, only the version it names is deleted (412 with `?wait=true` otherwise)."""
    row = await _existing(conn, name)
    _check_version(row, if_match)
    _guard_system(caller, is_system=row["is_system"], action="deleting")
    event = ScheduleDeleted(
        **stamp(caller, clock),
        schedule_id=row["schedule_id"],
        system=row["is_system"],
        **_expected(row, if_match),
    )
    receipt = await publisher.publish(event)
    return await _answer_write(conn, wait, event, receipt, lambda now: now is None)


async def _simple(
    kind: type[ScheduleEnabled | ScheduleDisabled | ScheduleResumed | ScheduleTriggered],
    name: str,
    conn: Any,
    publisher: Any,
    clock: Any,
    caller: Any,
) -> JSONResponse:
    row = await _existing(conn, name)
    if kind is not ScheduleTriggered:
        _guard_system(caller, is_system=row["is_system"], action="pausing or switching")
    event = kind(**stamp(caller, clock), schedule_id=row["schedule_id"])
    return accepted(await publisher.publish(event))


@router.post("/{name}/enable", status_code=202, responses={**write_answers(), **NOT_FOUND})
async def enable_job(
    name: Name, conn: ConnDep, publisher: PublisherDep, clock: ClockDep, caller: AdminDep
) -> JSONResponse:
    """Turn a disabled schedule on (missed occurrences are not caught up)."""
    return await _simple(ScheduleEnabled, name, conn, publisher, clock, caller)


@router.post("/{name}/disable", status_code=202, responses={**write_answers(), **NOT_FOUND})
async def disable_job(
    name: Name, conn: ConnDep, publisher: PublisherDep, clock: ClockDep, caller: AdminDep
) -> JSONResponse:
    """Turn a schedule off."""
    return await _simple(ScheduleDisabled, name, conn, publisher, clock, caller)


@router.post("/{name}/pause", status_code=202, responses={**write_answers(), **NOT_FOUND})
async def pause_job(
    name: Name,
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    body: Annotated[PauseBody | None, Body()] = None,
) -> JSONResponse:
    """Hold occurrences back; resume catches them up by the catch-up policy."""
    row = await _existing(conn, name)
    _guard_system(caller, is_system=row["is_system"], action="pausing")
    note = body.note if body else None
    event = SchedulePaused(**stamp(caller, clock), schedule_id=row["schedule_id"], note=note)
    return accepted(await publisher.publish(event))


@router.post("/{name}/resume", status_code=202, responses={**write_answers(), **NOT_FOUND})
async def resume_job(
    name: Name, conn: ConnDep, publisher: PublisherDep, clock: ClockDep, caller: AdminDep
) -> JSONResponse:
    """Resume a paused schedule."""
    return await _simple(ScheduleResumed, name, conn, publisher, clock, caller)


@router.post("/{name}/trigger", status_code=202, responses={**write_answers(), **NOT_FOUND})
async def trigger_job(
    name: Name,
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    body: Annotated[TriggerBody | None, Body()] = None,
) -> JSONResponse:
    """Run the schedule now, under its overlap policy or the body's `overlap`."""
    row = await _existing(conn, name)
    overlap = body.overlap if body else None
    event = ScheduleTriggered(
        **stamp(caller, clock), schedule_id=row["schedule_id"], overlap=overlap
    )
    return accepted(await publisher.publish(event))


@router.post("/{name}/backfill", status_code=202, responses={**write_answers(), **NOT_FOUND})
async def backfill_job(
    name: Name,
    body: Annotated[BackfillBody, Body()],
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
) -> JSONResponse:
    """Run every occurrence in [start, end) (and before now) again."""
    row = await _existing(conn, name)
    if body.end <= body.start:
        raise InvalidInput("end", "backfill end must be after start", location="body")
    event = ScheduleBackfillRequested(
        **stamp(caller, clock),
        schedule_id=row["schedule_id"],
        start=body.start,
        end=body.end,
        overlap=body.overlap,
    )
    return accepted(await publisher.publish(event))


@router.get(
    "/{name}/history", response_model=ScheduleHistoryPublic, responses={**READ_ERRORS, **NOT_FOUND}
)
async def job_history(
    name: Name,
    conn: ConnDep,
    caller: GuestDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000, description="Runs to skip.")] = 0,
) -> ScheduleHistoryPublic:
    """The latest runs (newest first, a page of `limit` after `offset`) and counts by outcome."""
    row = await _existing(conn, name)
    which = {"schedule_id": row["schedule_id"], "incarnation": row["incarnation"]}
    runs, count = await queries.list_schedule_runs(conn, **which, limit=limit, offset=offset)
    stats = {
        key: int(value) for key, value in (await queries.schedule_run_stats(conn, **which)).items()
    }
    ended = stats["succeeded"] + stats["partially_failed"] + stats["failed"]
    rate = stats["succeeded"] / ended if ended else None
    return ScheduleHistoryPublic(
        data=[ScheduleRunPublic.model_validate(run) for run in runs],
        count=count,
        stats=RunStatsPublic(**stats, success_rate=rate),
    )
