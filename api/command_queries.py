"""SQL of the fleet-wide command list, against the read model the projector writes.

Same conventions as `api.queries`: keyword-only functions returning `(items, count)`, pages
by the sort key of the last row served, driver errors leaving as `DatabaseUnavailable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from api.pagination import CursorKey
from api.queries import _count, _rows
from schemas.api import CommandPublic, CommandState, FleetCommandPublic
from schemas.base import CommandReason

_COLUMNS = sql.SQL(", ").join(
    sql.Identifier("c", name) for name in CommandPublic.model_fields if name != "kind"
)
_STATE = (
    "CASE WHEN c.outcome IS NULL THEN 'in_flight' WHEN c.outcome = 'completed' THEN 'succeeded'"
    " WHEN c.outcome = 'timed_out' THEN 'timed_out' ELSE 'failed' END"
)
_STATE_FILTER: dict[CommandState, str] = {
    CommandState.IN_FLIGHT: "c.outcome IS NULL",
    CommandState.SUCCEEDED: "c.outcome = 'completed'",
    CommandState.FAILED: "c.outcome IS NOT NULL AND c.outcome NOT IN ('completed', 'timed_out')",
    CommandState.TIMED_OUT: "c.outcome = 'timed_out'",
}
"""Served by the indexes scan_commands_in_flight and scan_commands_outcome (migration 015)."""


@dataclass(frozen=True)
class CommandFilters:
    """Every filter is optional; those given must all hold."""

    host_id: str | None = None
    scanner: str | None = None
    schedule_id: str | None = None
    occurrence: datetime | None = None
    organization: str | None = None
    reason: CommandReason | None = None
    state: CommandState | None = None
    issued_from: datetime | None = None
    """Issued at or after."""
    issued_until: datetime | None = None
    """Issued before."""


def _where(filters: CommandFilters) -> tuple[list[sql.Composable], dict[str, Any]]:
    where: list[sql.Composable] = []
    params: dict[str, Any] = {}
    equal = {
        "host_id": ("c.host_id", filters.host_id),
        "scanner": ("c.scanner", filters.scanner),
        "schedule_id": ("c.schedule_id", filters.schedule_id),
        "occurrence": ("c.occurrence", filters.occurrence),
        "organization": ("h.organization", filters.organization),
        "reason": ("c.reason", filters.reason.value if filters.reason else None),
    }
    for name, (column, value) in equal.items():
        if value is not None:
            where.append(sql.SQL(f"{column} = %({name})s"))
            params[name] = value
    if filters.state is not None:
        where.append(sql.SQL(_STATE_FILTER[filters.state]))
    if filters.issued_from is not None:
        where.append(sql.SQL("c.issued_at >= %(issued_from)s"))
        params["issued_from"] = filters.issued_from
    if filters.issued_until is not None:
        where.append(sql.SQL("c.issued_at < %(issued_until)s"))
        params["issued_until"] = filters.issued_until
    return where, params


_JOINED = sql.SQL("scan_commands c LEFT JOIN host_schedule h ON h.host_id = c.host_id")
"""The organization is the host's: commands do not carry it."""


async def list_commands(
    conn: psycopg.AsyncConnection,
    *,
    filters: CommandFilters,
    after: CursorKey | None = None,
    limit: int,
) -> tuple[list[FleetCommandPublic], int]:
    """Commands matching `filters`, newest issued first; key (issued_at, command_id) desc."""
    where, params = _where(filters)
    conditions = sql.SQL(" AND ").join(where) if where else sql.SQL("true")
    count = await _count(
        conn,
        sql.SQL("SELECT count(*) FROM {} WHERE {}").format(_JOINED, conditions),
        params,
    )
    if after is not None:
        where.append(sql.SQL("(c.issued_at, c.command_id) < (%(after_at)s, %(after_id)s)"))
        params["after_at"], params["after_id"] = after
    params["limit"] = limit
    rows = await _rows(
        conn,
        sql.SQL(
            "SELECT {columns}, c.occurrence, h.organization, {state} AS command_state"
            " FROM {joined} WHERE {conditions}"
            " ORDER BY c.issued_at DESC, c.command_id DESC LIMIT %(limit)s"
        ).format(
            columns=_COLUMNS,
            state=sql.SQL(_STATE),
            joined=_JOINED,
            conditions=sql.SQL(" AND ").join(where) if where else sql.SQL("true"),
        ),
        params,
    )
    return [FleetCommandPublic(**row) for row in rows], count


def command_key(command: FleetCommandPublic) -> CursorKey:
    return (command.issued_at, command.command_id)
