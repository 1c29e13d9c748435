"""The scanner registry: each scanner's pool, timeout, retry delay, default priority and switch.

Reads come from the projected scheduler config (`scheduler_config.config.scanners`); a write
publishes `scanner.upserted` on `schedule-changes` (key `config`), which the worker applies to
the config and the projector writes back. `compliance`, the adaptive scanner, is registered
from the start: until it is given an entry, it runs with the config's max_concurrent_scans,
scan_timeout_seconds and retry_delay_seconds, and its first PATCH stores that implicit entry
with the change applied.

A deactivated scanner keeps its schedules and its queued commands: the dispatcher holds them
(none is issued, none is dropped) until it is active again.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Path
from fastapi.responses import JSONResponse
from pydantic import Field

from api import queries
from api.deps import AdminDep, AuthenticatedRoute, ClockDep, ConnDep, GuestDep, PublisherDep
from api.errors import READ_ERRORS, InvalidInput
from api.routes import PREFIX
from api.writes import WaitDep, answer, stamp, write_answers
from schemas.api import ErrorPublic, SchedulerConfigPublic
from schemas.base import Contract
from schemas.changes import ScannerUpserted
from schemas.config import SCANNER_NAME_PATTERN, ScannerSpec

router = APIRouter(prefix=f"{PREFIX}/scanners", tags=["scanners"], route_class=AuthenticatedRoute)

ScannerName = Annotated[
    str, Path(pattern=SCANNER_NAME_PATTERN, description="The scanner's name, as commands name it.")
]
NOT_FOUND = {404: {"model": ErrorPublic, "description": "No scanner of that name is registered."}}


class ScannerPublic(ScannerSpec):
    """One registry entry and its commands in flight (issued, no outcome projected yet)."""

    in_flight: int = Field(default=0, ge=0, description="Its commands issued and not ended.")


class ScannersPublic(Contract):
    data: list[ScannerPublic]
    count: int


class ScannerWrite(ScannerSpec):
    """A whole entry for PUT: every field of a scanner; `name` may be left out, and if given
    must be the path's."""

    name: str | None = Field(default=None, pattern=SCANNER_NAME_PATTERN)  # type: ignore[assignment]


class ScannerChanges(Contract):
    """A partial change for PATCH: the fields given replace the entry's, same ranges."""

    description: str | None = Field(default=None, max_length=500)
    is_active: bool | None = None
    max_concurrent: int | None = Field(default=None, ge=1, le=100_000)
    timeout_seconds: int | None = Field(default=None, ge=60, le=86_400)
    retry_delay_seconds: int | None = Field(default=None, ge=0, le=86_400)
    default_priority: int | None = Field(default=None, ge=1, le=10)


def _public(spec: ScannerSpec, in_flight: dict[str, int]) -> ScannerPublic:
    return ScannerPublic(**spec.model_dump(), in_flight=in_flight.get(spec.name, 0))


def _entry(config: SchedulerConfigPublic, name: str) -> ScannerSpec:
    spec = config.scanner(name)
    if spec is None:
        raise HTTPException(404, f"no scanner named {name!r} is registered; PUT it first")
    return spec


@router.get("", response_model=ScannersPublic, responses=READ_ERRORS)
async def list_scanners(conn: ConnDep, caller: GuestDep) -> ScannersPublic:
    """The registry, `compliance` first, each with its commands in flight."""
    config = await queries.get_config(conn)
    in_flight = await queries.in_flight_by_scanner(conn)
    entries = [_public(spec, in_flight) for spec in config.registry()]
    return ScannersPublic(data=entries, count=len(entries))


@router.get("/{name}", response_model=ScannerPublic, responses={**READ_ERRORS, **NOT_FOUND})
async def get_scanner(name: ScannerName, conn: ConnDep, caller: GuestDep) -> ScannerPublic:
    """One scanner's entry (for `compliance`, its implicit one until it is given its own)."""
    spec = _entry(await queries.get_config(conn), name)
    return _public(spec, await queries.in_flight_by_scanner(conn))


async def _publish(
    spec: ScannerSpec,
    before: SchedulerConfigPublic,
    conn: Any,
    publisher: Any,
    clock: Any,
    caller: Any,
    wait: Any,
) -> JSONResponse:
    receipt = await publisher.publish(ScannerUpserted(**stamp(caller, clock), scanner=spec))

    async def read() -> ScannerPublic | None:
        config = await queries.get_config(conn)
        if config.version <= before.version:
            return None
        now = config.scanner(spec.name)
        return None if now is None else _public(now, await queries.in_flight_by_scanner(conn))

    return await answer(
        receipt,
        wait=wait,
        read=read,
        shows_change=lambda now: ScannerSpec(**now.model_dump(exclude={"in_flight"})) == spec,
    )


@router.put("/{name}", status_code=202, responses={**write_answers(ScannerPublic), **NOT_FOUND})
async def put_scanner(
    name: ScannerName,
    body: Annotated[ScannerWrite, Body()],
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    wait: WaitDep,
) -> JSONResponse:
    """Register a scanner, or replace its whole entry (fields left out take their defaults)."""
    if body.name is not None and body.name != name:
        raise InvalidInput(
            "name", f"the body names {body.name!r}, the path {name!r}", location="body"
        )
    spec = ScannerSpec(**body.model_dump(exclude={"name"}), name=name)
    before = await queries.get_config(conn)
    return await _publish(spec, before, conn, publisher, clock, caller, wait)


@router.patch("/{name}", status_code=202, responses={**write_answers(ScannerPublic), **NOT_FOUND})
async def patch_scanner(
    name: ScannerName,
    body: Annotated[ScannerChanges, Body()],
    conn: ConnDep,
    publisher: PublisherDep,
    clock: ClockDep,
    caller: AdminDep,
    wait: WaitDep,
) -> JSONResponse:
    """Change some fields of a registered scanner's entry; the others keep their values."""
    changes = body.model_dump(exclude_unset=True)
    if not changes:
        raise InvalidInput("body", "give at least one field to change", location="body")
    for field, value in changes.items():
        if value is None:
            raise InvalidInput(
                field, "null is not a value here; leave the field out", location="body"
            )
    before = await queries.get_config(conn)
    spec = ScannerSpec(**{**_entry(before, name).model_dump(), **changes})
    return await _publish(spec, before, conn, publisher, clock, caller, wait)
