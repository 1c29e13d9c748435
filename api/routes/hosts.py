"""Hosts: lists, one host's schedule and history, maintenance and forced scans, and the
inventory writes (add, import, deactivate, reactivate, delete) as `object-created` events."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from api import queries
from api.deps import (
    AdminDep,
    AnalystDep,
    AuthenticatedRoute,
    ClockDep,
    ConnDep,
    GuestDep,
    PublisherDep,
)
from api.errors import (
    NOT_FOUND,
    READ_ERRORS,
    HostExists,
    HostNotFound,
    error_answer,
)
from api.pagination import decode_cursor, split_page
from api.routes import PREFIX
from api.routes.host_import import parse_import
from api.writes import EVENT_ID_DOC, WaitDep, answer, stamp, write_answers
from schemas.api import (
    Accepted,
    HostCreate,
    HostDetailPublic,
    HostHistoryPublic,
    HostImportRow,
    HostsImported,
    HostsPublic,
    MaintenanceUpdate,
)
from schemas.base import ComplianceState
from schemas.changes import HostMaintenanceSet, HostScanRequested
from schemas.objects import ObjectAttributes, ObjectEvent, Operation

router = APIRouter(prefix=PREFIX, tags=["hosts"], route_class=AuthenticatedRoute)

HOST_OBJECT_TYPE = "host"
IMPORT_BATCH_SIZE = 500
"""Hosts per acknowledged batch of a bulk import."""
HOST_IMPORT_ROW = HostImportRow.model_json_schema()

NO_NUL = r"^[^\x00]*$"
HostId = Annotated[str, Path(min_length=1, max_length=255, pattern=NO_NUL)]
Cursor = Annotated[
    str | None,
    Query(max_length=2048, pattern=r"^[A-Za-z0-9_-]+$", description="`next_cursor` of a page."),
]
Label = Annotated[str, Field(max_length=512, pattern=r"^[^=\x00]+=[^\x00]*$")]


async def _known_host(conn: ConnDep, host_id: str) -> HostDetailPublic:
    host = await queries.get_host(conn, host_id=host_id)
    if host is None:
        raise HostNotFound(f"host {host_id!r} is not in the read model")
    return host


@router.get("/hosts-due", response_model=HostsPublic, responses=READ_ERRORS)
async def hosts_due(
    conn: ConnDep,
    clock: ClockDep,
    caller: GuestDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
) -> HostsPublic:
    """Hosts whose scan time has come, in dispatch order (priority desc, due time asc)."""
    hosts, count = await queries.list_hosts_due(conn, now=clock.now(), limit=limit)
    return HostsPublic(data=hosts, count=count)


@router.get("/hosts", response_model=HostsPublic, responses=READ_ERRORS)
async def list_hosts(
    conn: ConnDep,
    clock: ClockDep,
    caller: GuestDep,
    state: ComplianceState | None = None,
    maintenance: bool | None = None,
    overdue: Annotated[bool | None, Query(description="Due with no command in flight.")] = None,
    label: Annotated[list[Label] | None, Query(description="key=value; repeat for AND.")] = None,
    organization: Annotated[str | None, Query(max_length=255, pattern=NO_NUL)] = None,
    failing: Annotated[
        bool | None, Query(description="Whose latest scan failed (failures in a row > 0).")
    ] = None,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> HostsPublic:
    """Hosts matching every filter given, by host_id, a page at a time."""
    labels = dict(item.split("=", 1) for item in label or [])
    rows, count = await queries.list_hosts(
        conn,
        now=clock.now(),
        state=state,
        maintenance=maintenance,
        overdue=overdue,
        labels=labels,
        organization=organization,
        failing=failing,
        after=decode_cursor(cursor, shape=(str,)),
        limit=limit + 1,
    )
    hosts, next_cursor = split_page(rows, limit, queries.host_key)
    return HostsPublic(data=hosts, count=count, next_cursor=next_cursor)


@router.post(
    "/hosts:import",
    status_code=202,
    response_model=HostsImported,
    responses=write_answers(),
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "Hosts as JSON lines, a JSON array or CSV (header: id, hostname, "
            "organization, labels, active).",
            "content": {
                "application/x-ndjson": {"schema": HOST_IMPORT_ROW},
                "application/json": {"schema": {"type": "array", "items": HOST_IMPORT_ROW}},
                "text/csv": {"schema": {"type": "string"}},
            },
        }
    },
)
async def import_hosts(
    request: Request, publisher: PublisherDep, clock: ClockDep, caller: AdminDep
) -> HostsImported:
    """Onboard many hosts: one object-created event each, published in acknowledged batches.

    All rows are checked first; one bad row refuses the whole import (422 names its line).
    First scans of new hosts spread over the config's `initial_spread_seconds`; a host
    already known keeps its schedule and takes the new attributes.
    """
    rows = parse_import(await request.body(), request.headers.get("content-type", ""))
    now = clock.now()
    events = [
        ObjectEvent(
            event_id=uuid.uuid4(),
            object_type=HOST_OBJECT_TYPE,
            object_id=row.id,
            occurred_at=now,
            attributes=ObjectAttributes(
                hostname=row.hostname,
                organization=row.organization,
                labels=row.labels,
                is_active=row.active,
            ),
        )
        for row in rows
    ]
    batches = await publisher.publish_objects(
        events, batch_size=IMPORT_BATCH_SIZE, actor=caller.name[:255]
    )
    return HostsImported(hosts=len(events), batches=batches)


@router.post(
    "/hosts",
    status_code=202,
    response_model=Accepted,
    responses={**write_answers(HostDetailPublic), 409: error_answer("The host exists already.")},
)
async def create_host(
    body: HostCreate,
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    wait: WaitDep,
) -> JSONResponse:
    """Add a host to the fleet: published as `object-created` (type `host`); scanned at once."""
    if await queries.get_host(conn, host_id=body.host_id) is not None:
        raise HostExists(f"host {body.host_id!r} exists already")
    attributes = ObjectAttributes(**body.model_dump(exclude={"host_id"}))
    stamped = stamp(caller, clock)
    event = ObjectEvent(
        event_id=stamped["event_id"],
        occurred_at=stamped["occurred_at"],
        object_type=HOST_OBJECT_TYPE,
        object_id=body.host_id,
        attributes=attributes,
    )
    receipt = await publisher.publish_object(event, actor=caller.name[:255])
    return await answer(
        receipt,
        wait=wait,
        read=lambda: queries.get_host(conn, host_id=body.host_id),
        shows_change=lambda host: True,
    )


@router.get(
    "/hosts/{host_id}", response_model=HostDetailPublic, responses={**READ_ERRORS, **NOT_FOUND}
)
async def get_host(host_id: HostId, conn: ConnDep, caller: GuestDep) -> HostDetailPublic:
    """A host's schedule with its latest compliance result."""
    return await _known_host(conn, host_id)


@router.get(
    "/hosts/{host_id}/history",
    response_model=HostHistoryPublic,
    responses={**READ_ERRORS, **NOT_FOUND},
)
async def host_history(
    host_id: HostId,
    conn: ConnDep,
    caller: GuestDep,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> HostHistoryPublic:
    """Scan results and commands of a host, newest first."""
    await _known_host(conn, host_id)
    after = decode_cursor(cursor, shape=(datetime, str, str))
    rows, count = await queries.list_host_history(
        conn, host_id=host_id, after=after, limit=limit + 1
    )
    entries, next_cursor = split_page(rows, limit, queries.history_key)
    return HostHistoryPublic(data=entries, count=count, next_cursor=next_cursor)


@router.put(
    "/hosts/{host_id}/maintenance",
    status_code=202,
    response_model=Accepted,
    responses={**write_answers(HostDetailPublic), **NOT_FOUND},
)
async def set_maintenance(
    host_id: HostId,
    body: MaintenanceUpdate,
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AnalystDep,
    wait: WaitDep,
) -> JSONResponse:
    """Put a host in maintenance (optionally for 1..168 hours) or take it out."""
    before = await _known_host(conn, host_id)
    change = HostMaintenanceSet(**stamp(caller, clock), host_id=host_id, **body.model_dump())
    receipt = await publisher.publish(change)
    unchanged = not body.enabled and not before.maintenance_mode
    return await answer(
        receipt,
        wait=wait,
        read=lambda: queries.get_host(conn, host_id=host_id),
        shows_change=lambda host: (
            (host.version > before.version or unchanged) and host.maintenance_mode == body.enabled
        ),
    )


@router.post(
    "/hosts/{host_id}/force-scan",
    status_code=202,
    response_model=Accepted,
    responses={**write_answers(HostDetailPublic), **NOT_FOUND},
)
async def force_scan(
    host_id: HostId,
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AnalystDep,
    wait: WaitDep,
) -> JSONResponse:
    """Scan a host now with top priority, even in maintenance, inactive or down."""
    before = await _known_host(conn, host_id)
    receipt = await publisher.publish(HostScanRequested(**stamp(caller, clock), host_id=host_id))
    return await answer(
        receipt,
        wait=wait,
        read=lambda: queries.get_host(conn, host_id=host_id),
        shows_change=lambda host: host.version > before.version,
    )


async def _publish_activity(
    host_id: str,
    active: bool,
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    wait: WaitDep,
) -> JSONResponse:
    """An `object-created` update carrying the host's current attributes, `is_active` set."""
    before = await _known_host(conn, host_id)
    current = await queries.get_host_attributes(conn, host_id=host_id)
    if current is None:
        raise HostNotFound(f"host {host_id!r} is not in the read model")
    stamped = stamp(caller, clock)
    event = ObjectEvent(
        event_id=stamped["event_id"],
        occurred_at=stamped["occurred_at"],
        object_type=HOST_OBJECT_TYPE,
        object_id=host_id,
        operation=Operation.UPDATED,
        attributes=ObjectAttributes.model_validate({**current, "is_active": active}),
    )
    receipt = await publisher.publish_object(event, actor=caller.name[:255])
    unchanged = before.is_active == active
    return await answer(
        receipt,
        wait=wait,
        read=lambda: queries.get_host(conn, host_id=host_id),
        shows_change=lambda host: (
            (host.version > before.version or unchanged) and host.is_active == active
        ),
    )


@router.post(
    "/hosts/{host_id}/deactivate",
    status_code=202,
    response_model=Accepted,
    responses={**write_answers(HostDetailPublic), **NOT_FOUND},
)
async def deactivate_host(
    host_id: HostId,
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    wait: WaitDep,
) -> JSONResponse:
    """Stop scanning a host but keep it: an `object-created` update with `is_active` false and
    every other attribute as the read model holds it. Its waiting claim is withdrawn."""
    return await _publish_activity(host_id, False, conn, publisher, clock, caller, wait)


@router.post(
    "/hosts/{host_id}/reactivate",
    status_code=202,
    response_model=Accepted,
    responses={**write_answers(HostDetailPublic), **NOT_FOUND},
)
async def reactivate_host(
    host_id: HostId,
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    wait: WaitDep,
) -> JSONResponse:
    """Scan an inactive host again (at once if it is due): an `object-created` update with
    `is_active` true and every other attribute as the read model holds it."""
    return await _publish_activity(host_id, True, conn, publisher, clock, caller, wait)


@router.delete(
    "/hosts/{host_id}",
    status_code=202,
    response_model=Accepted,
    responses={
        **write_answers(),
        200: {
            "model": Accepted,
            "description": "With wait=true: the read model no longer shows the host "
            '(`status` is "deleted").',
            "headers": EVENT_ID_DOC,
        },
        **NOT_FOUND,
    },
)
async def delete_host(
    host_id: HostId,
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    wait: WaitDep,
) -> JSONResponse:
    """Remove a host from the fleet: published as `object-created` with operation `deleted`.

    Its schedule and any command in flight end; its scan history stays readable by command.
    Created again under the same id, it starts over as a new host.
    """
    await _known_host(conn, host_id)
    stamped = stamp(caller, clock)
    event = ObjectEvent(
        event_id=stamped["event_id"],
        occurred_at=stamped["occurred_at"],
        object_type=HOST_OBJECT_TYPE,
        object_id=host_id,
        operation=Operation.DELETED,
    )
    receipt = await publisher.publish_object(event, actor=caller.name[:255])

    async def gone() -> Accepted | None:
        if await queries.get_host(conn, host_id=host_id) is not None:
            return None
        return Accepted(event_id=receipt.event_id, status="deleted")

    return await answer(receipt, wait=wait, read=gone, shows_change=lambda _: True)
