"""Bytes on the wire <-> contract models; anything undecodable becomes a dead letter."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, NamedTuple

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from schemas.base import Timestamp
from schemas.changes import ScheduleChange
from schemas.commands import DeadLetter, ScanCommand
from schemas.internal import (
    ClaimWithdrawn,
    ControlMessage,
    DispatchMessage,
    DispatchRequested,
    HostSignal,
    ScheduleSignal,
    SlotReleased,
)
from schemas.objects import ObjectEvent
from schemas.results import ScanCompleted
from schemas.schedules import ScheduleRunRecorded, ScheduleStateChanged
from schemas.state import HostSchedule, HostStateChanged
from streams.policy.ids import message_id

RAW_KEPT_CHARS = 10_000

object_event = TypeAdapter(ObjectEvent)
schedule_change: TypeAdapter[Any] = TypeAdapter(ScheduleChange)
scan_completed = TypeAdapter(ScanCompleted)
host_signal: TypeAdapter[Any] = TypeAdapter(HostSignal)
dispatch_message: TypeAdapter[Any] = TypeAdapter(DispatchMessage)
dispatch_batch_item: TypeAdapter[Any] = TypeAdapter(
    Annotated[DispatchRequested | SlotReleased | ClaimWithdrawn, Field(discriminator="kind")]
)
control_message: TypeAdapter[Any] = TypeAdapter(ControlMessage)
schedule_signal: TypeAdapter[Any] = TypeAdapter(ScheduleSignal)
host_schedule = TypeAdapter(HostSchedule)
scan_command = TypeAdapter(ScanCommand)
dead_letter_message = TypeAdapter(DeadLetter)
schedule_state_changed = TypeAdapter(ScheduleStateChanged)
schedule_run_recorded = TypeAdapter(ScheduleRunRecorded)


class Undecodable(ValueError):
    """The bytes are not a valid message for their topic; `str(error)` is the reason."""


def decode(adapter: TypeAdapter[Any], raw: bytes | None) -> Any:
    if raw is None:
        raise Undecodable("empty value (tombstone) where a message was expected")
    try:
        return adapter.validate_json(raw)
    except ValidationError as error:
        raise Undecodable(_describe(error)) from None


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False)[:10]:
        where = ".".join(str(part) for part in item["loc"]) or "message"
        problems.append(f"{where}: {item['msg']}")
    if any(item["type"] == "json_invalid" for item in error.errors()):
        return "not valid JSON: " + "; ".join(problems)
    return "schema validation failed: " + "; ".join(problems)


def encode(model: BaseModel) -> bytes:
    return model.model_dump_json().encode()


def schedule_state_changed_record(
    schedule_id: str, version: int, stored: bytes | None, changed_at: datetime
) -> bytes:
    """A `ScheduleStateChanged` around the schedule's state as its table stores it, not
    encoded again (a cron run stores its schedule's state three times), written out directly
    as pydantic writes it (no spaces, UTF-8 kept): building a model only to encode it would
    repeat, for every record, work the stored bytes already hold. It reads back as the full
    record; it only leaves out default values."""
    return b'{"schedule_id":%s,"version":%d,"state":%s,"changed_at":%s}' % (
        json.dumps(schedule_id, ensure_ascii=False).encode(),
        version,
        b"null" if stored is None else stored,
        _timestamp.dump_json(changed_at),
    )


_timestamp = TypeAdapter(Timestamp)

DELETED_AT_HEADER = "kairos-deleted-at"
"""The header of a host's tombstone in the hosts changelog: when the host was deleted, by the
worker's clock (RFC 3339). A tombstone has no value to say it in."""
CREATED_AT_HEADER = "kairos-created-at"
"""The header of a host's tombstone: when the incarnation it ends was created (RFC 3339), so
that a deletion read again after the host was created again does not end the new one."""


def instant(at: datetime) -> bytes:
    """`at` as RFC 3339 bytes, as pydantic writes a timestamp (without the JSON quotes)."""
    return _timestamp.dump_json(at)[1:-1]


def host_changelog_change(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]], timestamp_ms: int
) -> HostStateChanged:
    """A record of the hosts table's changelog as the read model applies it.

    The value is the host's schedule as its worker stores it (`stored_schedule`), whose
    version and `updated_at` say which change it is and when; a tombstone (the host deleted)
    carries neither: its version is 0, which the projector reads as "the incarnation the read
    model holds", and its time comes from `DELETED_AT_HEADER` (the record's own timestamp if
    the header is missing); `CREATED_AT_HEADER`, where present, says which incarnation it ends.
    Raises `Undecodable`.
    """
    try:
        host_id = _json_string(key) if key is not None else None
    except ValueError:
        host_id = None
    if not isinstance(host_id, str):
        raise Undecodable(f"hosts changelog key {key!r} is not a JSON host id")
    if value is None:
        said = dict(headers)
        deleted_at, created_at = said.get(DELETED_AT_HEADER), said.get(CREATED_AT_HEADER)
        try:
            changed_at = (
                _timestamp.validate_json(b'"%s"' % deleted_at)
                if deleted_at is not None
                else datetime.fromtimestamp(timestamp_ms / 1000, UTC)
            )
            ended = _timestamp.validate_json(b'"%s"' % created_at) if created_at else None
        except ValidationError as error:
            raise Undecodable(_describe(error)) from None
        return HostStateChanged(
            host_id=host_id,
            version=0,
            schedule=None,
            changed_at=changed_at,
            deleted_created_at=ended,
        )
    schedule: HostSchedule = decode(host_schedule, value)
    # Validated rather than `model_construct`ed: pydantic takes the schedule as the model it
    # already is, without validating it again, so validation is the cheaper of the two here.
    return HostStateChanged(
        host_id=host_id, version=schedule.version, schedule=schedule, changed_at=schedule.updated_at
    )


_PLAIN_JSON_STRING = re.compile(rb'"[^"\\\x00-\x1f]*"')


def _json_string(raw: bytes) -> Any:
    """`raw` read as JSON; a string without escapes (every host id Kairos writes) is read
    without the `json` module, whose call costs far more than slicing a key this short."""
    if _PLAIN_JSON_STRING.fullmatch(raw):
        return raw[1:-1].decode("utf-8")
    return json.loads(raw)


def dispatch_waiting(request: DispatchRequested) -> bytes:
    """The dispatcher table's entry for a request still waiting for a slot."""
    return b'{"request":%s}' % request.model_dump_json().encode()


def dispatch_slot(request: DispatchRequested, *, issued_at: datetime, deadline: datetime) -> bytes:
    """The dispatcher table's entry for an issued command: its request and its slot's times.

    Written out around the request's own JSON, so each issued command encodes its request
    once, instead of pydantic dumping it to a dict and `json` encoding that again."""
    return b'{"request":%s,"issued_at":"%s","deadline":"%s"}' % (
        request.model_dump_json().encode(),
        issued_at.isoformat().encode(),
        deadline.isoformat().encode(),
    )


RELEASED_MARKER = b'"released_at"'
"""Found only in a released command's entry: a string value holds its quotes escaped."""


def dispatch_released(at: datetime) -> bytes:
    """The dispatcher table's marker for a released command."""
    return b'{"released_at":"%s"}' % at.isoformat().encode()


class DispatchEntry(NamedTuple):
    """A dispatcher table entry read back: a released marker (`released_at`), a waiting
    request (no `deadline`), or an issued command's slot."""

    request: DispatchRequested | None
    issued_at: datetime | None
    deadline: datetime | None
    released_at: datetime | None


def read_dispatch_entry(stored: bytes) -> DispatchEntry:
    """What `dispatch_waiting`, `dispatch_slot` or `dispatch_released` wrote; raises on
    anything else (the caller parks it as unreadable state)."""
    entry = json.loads(stored)
    if "released_at" in entry:
        return DispatchEntry(None, None, None, datetime.fromisoformat(entry["released_at"]))
    request = DispatchRequested.model_validate(entry["request"])
    if "deadline" not in entry:
        return DispatchEntry(request, None, None, None)
    deadline = datetime.fromisoformat(entry["deadline"])
    # A slot written by an older worker, before slots kept their issue time, has a deadline alone.
    issued_at = datetime.fromisoformat(entry.get("issued_at") or entry["deadline"])
    return DispatchEntry(request, issued_at, deadline, None)


def dispatch_batch(encoded: list[bytes]) -> bytes:
    """A `DispatchBatch` of messages each already encoded, without encoding them again."""
    return b'{"kind":"dispatch.batch","messages":[' + b",".join(encoded) + b"]}"


def size_bounded(encoded: Iterable[bytes], max_bytes: int) -> Iterator[list[bytes]]:
    """`encoded` in consecutive runs whose joined size stays within `max_bytes`, to be sent as
    one record each (a message over the bound alone goes alone)."""
    chunk: list[bytes] = []
    size = 0
    for message in encoded:
        if chunk and size + len(message) > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append(message)
        size += len(message) + 1
    if chunk:
        yield chunk


def schedule_fan_outs(encoded: list[bytes]) -> bytes:
    """A `ScheduleFanOuts` of fan-outs each already encoded, without encoding them again."""
    return b'{"kind":"schedule.fanout.batch","fan_outs":[' + b",".join(encoded) + b"]}"


def split_dispatch_batch(
    raw: bytes | None,
) -> tuple[list[Any], list[tuple[int, bytes, str]]] | None:
    """A dispatch batch that does not decode whole, read message by message.

    Returns the messages that decode, in order, and each one that does not (its index, itself
    encoded alone, the reason); None when `raw` is not a batch at all. One unreadable request, say
    from a newer worker during a rolling upgrade, then costs only itself, not the claims and
    releases beside it."""
    try:
        document = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get("kind") != "dispatch.batch":
        return None
    items = document.get("messages")
    if not isinstance(items, list):
        return None
    readable: list[Any] = []
    unreadable: list[tuple[int, bytes, str]] = []
    for index, item in enumerate(items):
        encoded = json.dumps(item, separators=(",", ":")).encode()
        try:
            readable.append(decode(dispatch_batch_item, encoded))
        except Undecodable as error:
            unreadable.append((index, encoded, f"message {index} of a dispatch batch: {error}"))
    return readable, unreadable


def dead_letter(
    *,
    source_topic: str,
    partition: int | None,
    offset: int | None,
    key: bytes | None,
    raw: bytes | None,
    error: str,
    received_at: datetime,
    part: int | None = None,
) -> DeadLetter:
    """`part` tells apart the letters of one record, such as the messages of a batch."""
    text_key = _storable(key.decode("utf-8", "replace")) if key is not None else None
    identity = f"{source_topic}/{partition}/{offset}"
    if part is not None:
        identity += f"/{part}"
    return DeadLetter(
        event_id=message_id("dead-letter", identity),
        source_topic=source_topic,
        partition=partition,
        offset=offset,
        key=text_key,
        error=_storable(error[:2000]),
        raw=_storable((raw or b"").decode("utf-8", "replace")[:RAW_KEPT_CHARS]),
        received_at=received_at,
    )


def _storable(text: str) -> str:
    """NUL is valid UTF-8, but no PostgreSQL text can hold it, and the read model keeps these."""
    return text.replace("\x00", "\ufffd")


def dumps(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
