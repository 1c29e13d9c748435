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
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    create_model,
)

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


def _json_integer(value: object) -> object:
    """Only JSON numbers: `true` and `"5"` are not integers in a JSON body."""
    if isinstance(value, bool | str | bytes):
        raise ValueError("must be a JSON integer")
    return value


def _body_fields(*, defaults: bool) -> dict[str, Any]:
    """ScannerSpec's fields but `name`, with its ranges, as a JSON body takes them: integers
    only as JSON numbers, booleans only as JSON booleans, and never null."""
    fields: dict[str, Any] = {}
    for name, info in ScannerSpec.model_fields.items():
        if name == "name":
            continue
        if info.annotation is bool:
            kind: Any = StrictBool
        elif info.annotation is int:
            kind = Annotated[(int, *info.metadata, BeforeValidator(_json_integer))]
        else:
            kind = Annotated[(StrictStr, *info.metadata)]
        default = info.default if defaults else None
        fields[name] = (kind, Field(default=default, description=info.description))
    return fields


ScannerWrite: type[BaseModel] = create_model(
    "ScannerWrite",
    __doc__="Body of PUT /scanners/{name}: the whole entry; fields left out take their"
    " defaults; `name` may be left out, and if given must be the path's.",
    __config__=ConfigDict(frozen=True, extra="forbid"),
    name=(Annotated[str, Field(pattern=SCANNER_NAME_PATTERN)], Field(default=None)),
    **_body_fields(defaults=True),
)

ScannerChanges: type[BaseModel] = create_model(
    "ScannerChanges",
    __doc__="Body of PATCH /scanners/{name}: the fields to change, at least one, with the"
    " ranges of ScannerSpec.",
    __config__=ConfigDict(frozen=True, extra="forbid", json_schema_extra={"minProperties": 1}),
    **_body_fields(defaults=False),
)


def _public(spec: ScannerSpec, in_flight: dict[str, int]) -> ScannerPublic:
    return ScannerPublic(**spec.model_dump(), in_flight=in_flight.get(spec.name, 0))


def _entry(config: SchedulerConfigPublic, name: str) -> ScannerSpec:
    spec = config.scanner(name)
    if spec is None:
        raise HTTPException(404, f"no scanner named {name!r} is registered; PUT it first")
    return spec


@router.get("", response_model=ScannersPublic, responses=READ_ERRORS)
async def list_scanners(conn: ConnDep, caller: GuestDep) -> ScannersPublic:
    """The registry, `compliance` first and the others by name, each with its commands in
    flight."""
    config = await queries.get_config(conn)
    in_flight = await queries.in_flight_by_scanner(conn)
    adaptive, *others = config.registry()
    ordered = [adaptive, *sorted(others, key=lambda spec: spec.name)]
    entries = [_public(spec, in_flight) for spec in ordered]
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
    given = body.model_dump(exclude={"name"})
    named = body.model_dump()["name"]
    if named is not None and named != name:
        raise InvalidInput("name", f"the body names {named!r}, the path {name!r}", location="body")
    spec = ScannerSpec(**given, name=name)
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
    before = await queries.get_config(conn)
    spec = ScannerSpec(**{**_entry(before, name).model_dump(), **changes})
    return await _publish(spec, before, conn, publisher, clock, caller, wait)
