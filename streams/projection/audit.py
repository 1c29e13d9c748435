"""The audit trail: every change published on `schedule-changes` and `object-created` becomes
one `audit` row (who, when, what, about which subject), written in the projector's batch
transaction.

Reading the topics rather than recording at the API means changes from every producer are
audited, the API's and any other's alike. `object-created` has no actor field in its contract:
the API names its caller in the `kairos-actor` header; events without one (an inventory feed)
are recorded with no actor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from schemas.changes import ConfigUpdated, ScannerUpserted, ScheduleChange
from schemas.objects import ObjectEvent
from schemas.schedules import ScheduleUpserted
from schemas.topics import ACTOR_HEADER
from streams import codec
from streams.codec import Undecodable


@dataclass(frozen=True)
class AuditEntry:
    """One audit row: `subject_kind` is host, schedule, config or scanner here."""

    event_id: UUID
    at: datetime
    actor: str | None
    type: str
    subject_kind: str
    subject_id: str
    summary: dict[str, Any] = field(default_factory=dict)


def change_entry(change: ScheduleChange) -> AuditEntry:
    """The audit row of a change on `schedule-changes`."""
    kind, subject = _subject(change)
    return AuditEntry(
        event_id=change.event_id,
        at=change.occurred_at,
        actor=change.actor,
        type=change.type,
        subject_kind=kind,
        subject_id=subject,
        summary=_summary(change),
    )


def object_entry(event: ObjectEvent, actor: str | None) -> AuditEntry:
    """The audit row of an inventory event: `host.created`, `host.updated`, `host.deleted`."""
    attributes = event.attributes.model_dump(mode="json", exclude_defaults=True)
    return AuditEntry(
        event_id=event.event_id,
        at=event.occurred_at,
        actor=actor,
        type=f"{event.object_type}.{event.operation.value}",
        subject_kind=event.object_type,
        subject_id=event.object_id,
        summary={"attributes": attributes} if attributes else {},
    )


def _subject(change: ScheduleChange) -> tuple[str, str]:
    host_id: str | None = getattr(change, "host_id", None)
    if host_id is not None:
        return "host", host_id
    schedule_id: str | None = getattr(change, "schedule_id", None)
    if schedule_id is not None:
        return "schedule", schedule_id
    if isinstance(change, ScannerUpserted):
        return "scanner", change.scanner.name
    return "config", "config"


SUMMARY_LEAVES_OUT = frozenset(
    {"event_id", "occurred_at", "actor", "type", "host_id", "schema_version"}
)


def _summary(change: ScheduleChange) -> dict[str, Any]:
    """What the change set, compactly: a config change's fields, a schedule's definition in
    brief, a scanner's entry; the remaining fields of the others."""
    if isinstance(change, ConfigUpdated):
        return {"changes": change.changes.model_dump(mode="json", exclude_none=True)}
    if isinstance(change, ScheduleUpserted):
        schedule = change.schedule.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        brief = {k: v for k, v in schedule.items() if not isinstance(v, dict | list)}
        return {"create_only": change.create_only, "schedule": brief}
    if isinstance(change, ScannerUpserted):
        return {"scanner": change.scanner.model_dump(mode="json", exclude_none=True)}
    fields = change.model_dump(mode="json", exclude_none=True, exclude=set(SUMMARY_LEAVES_OUT))
    fields.pop("schedule_id", None)
    return fields


def decode_change(record: Any) -> AuditEntry | None:
    """A `schedule-changes` record's audit row; None for one that does not decode (the
    worker dead-letters it, and a redrive is audited when it decodes)."""
    try:
        return change_entry(codec.decode(codec.schedule_change, record.value))
    except Undecodable:
        return None


def decode_object(record: Any) -> AuditEntry | None:
    """An `object-created` record's audit row, its actor from the header; None if undecodable."""
    try:
        event = codec.decode(codec.object_event, record.value)
    except Undecodable:
        return None
    actor = None
    for name, value in record.headers or ():
        if name == ACTOR_HEADER and value is not None:
            actor = value.decode("utf-8", errors="replace")[:255]
    return object_entry(event, actor)


_INSERT = (
    "INSERT INTO audit (event_id, at, actor, type, subject_kind, subject_id, summary)"
    " SELECT * FROM unnest(%s::uuid[], %s::timestamptz[], %s::text[], %s::text[], %s::text[],"
    " %s::text[], %s::jsonb[]) ON CONFLICT (event_id) DO NOTHING"
)


async def record(conn: psycopg.AsyncConnection, entries: list[AuditEntry]) -> None:
    """Insert the rows; a replayed event (same id) is written once."""
    if not entries:
        return
    await conn.execute(
        _INSERT,
        (
            [e.event_id for e in entries],
            [e.at for e in entries],
            [e.actor for e in entries],
            [e.type for e in entries],
            [e.subject_kind for e in entries],
            [e.subject_id for e in entries],
            [json.dumps(e.summary, separators=(",", ":"), default=str) for e in entries],
        ),
    )
