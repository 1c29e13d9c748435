"""Read-model SQL of the audit trail and of dead-letter redrives."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from api.pagination import CursorKey
from api.queries import driver_errors
from schemas.api import DeadLetterPublic
from schemas.audit import AuditEntryPublic

_AUDIT_COLUMNS = "event_id, at, actor, type, subject_kind, subject_id, summary"


async def _rows(
    conn: psycopg.AsyncConnection, statement: str | sql.Composable, params: dict[str, Any]
) -> list[dict[str, Any]]:
    async with driver_errors():
        cursor = conn.cursor(row_factory=dict_row)
        await cursor.execute(statement, params)
        return await cursor.fetchall()


async def list_audit(
    conn: psycopg.AsyncConnection,
    *,
    actor: str | None = None,
    change_type: str | None = None,
    subject: str | None = None,
    subject_kind: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    after: CursorKey | None = None,
    limit: int,
) -> tuple[list[AuditEntryPublic], int]:
    """Audit rows newest first, key (at, event_id) descending, and how many match."""
    clauses: list[str] = []
    params: dict[str, Any] = {"limit": limit}
    for column, value in (
        ("actor", actor),
        ("type", change_type),
        ("subject_id", subject),
        ("subject_kind", subject_kind),
    ):
        if value is not None:
            clauses.append(f"{column} = %({column})s")
            params[column] = value
    if since is not None:
        clauses.append("at >= %(since)s")
        params["since"] = since
    if until is not None:
        clauses.append("at < %(until)s")
        params["until"] = until
    where = " AND ".join(clauses)
    page = list(clauses)
    if after is not None:
        page.append("(at, event_id) < (%(after_at)s, %(after_id)s::uuid)")
        params.update(after_at=after[0], after_id=after[1])
    rows = await _rows(
        conn,
        f"SELECT {_AUDIT_COLUMNS} FROM audit"
        + (f" WHERE {' AND '.join(page)}" if page else "")
        + " ORDER BY at DESC, event_id DESC LIMIT %(limit)s",
        params,
    )
    counted = await _rows(
        conn, "SELECT count(*) AS count FROM audit" + (f" WHERE {where}" if where else ""), params
    )
    return [AuditEntryPublic(**row) for row in rows], int(counted[0]["count"])


def audit_key(entry: AuditEntryPublic) -> CursorKey:
    return (entry.at, str(entry.event_id))


async def schedule_authors(
    conn: psycopg.AsyncConnection, schedule_id: str
) -> tuple[str | None, str | None]:
    """(created_by, updated_by) of a schedule: the actor of its latest create (an upsert
    with create_only, or the first upsert recorded), and of its latest change of any kind."""
    rows = await _rows(
        conn,
        "SELECT"
        " (SELECT actor FROM audit WHERE subject_kind = 'schedule' AND subject_id = %(id)s"
        "  AND type = 'schedule.upserted'"
        "  ORDER BY (summary->>'create_only')::boolean DESC NULLS LAST, at DESC LIMIT 1)"
        "  AS created_by,"
        " (SELECT actor FROM audit WHERE subject_kind = 'schedule' AND subject_id = %(id)s"
        "  ORDER BY at DESC, event_id DESC LIMIT 1) AS updated_by",
        {"id": schedule_id},
    )
    return (rows[0]["created_by"], rows[0]["updated_by"]) if rows else (None, None)


async def get_dead_letter(
    conn: psycopg.AsyncConnection, event_id: uuid.UUID, *, lock: bool = False
) -> DeadLetterPublic | None:
    """The dead letter; with `lock`, its row stays locked to the end of the caller's
    transaction, so two redrives of one letter take turns."""
    columns = sql.SQL(", ").join(sql.Identifier(name) for name in DeadLetterPublic.model_fields)
    rows = await _rows(
        conn,
        sql.SQL("SELECT {columns} FROM dead_letters WHERE event_id = %(id)s{lock}").format(
            columns=columns, lock=sql.SQL(" FOR UPDATE" if lock else "")
        ),
        {"id": event_id},
    )
    return DeadLetterPublic(**rows[0]) if rows else None


async def mark_redriven(
    conn: psycopg.AsyncConnection,
    *,
    event_id: uuid.UUID,
    at: datetime,
    actor: str,
    redrive_event_id: str,
    summary: dict[str, Any],
) -> None:
    """Record the redrive on the dead letter and in the audit trail, in one transaction."""
    async with driver_errors(), conn.transaction():
        await conn.execute(
            "UPDATE dead_letters SET redriven_at = %s, redriven_by = %s, redrive_event_id = %s"
            " WHERE event_id = %s",
            (at, actor, redrive_event_id, event_id),
        )
        await conn.execute(
            "INSERT INTO audit (event_id, at, actor, type, subject_kind, subject_id, summary)"
            " VALUES (%s, %s, %s, 'dead_letter.redriven', 'dead_letter', %s, %s::jsonb)",
            (uuid.uuid4(), at, actor, str(event_id), json.dumps(summary, default=str)),
        )
