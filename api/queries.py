"""Every SQL statement of the API, against the read model the projector writes.

Functions are keyword-only; lists return `(items, count)` where `count` covers all pages.
Paged lists take the sort key of the last row served (`after`) and return up to `limit`
rows: callers ask for one more than they serve to learn whether a next page exists.
Driver errors leave here as `DatabaseUnavailable`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from api.pagination import CursorKey
from kairos.floor.db import DatabaseUnavailable
from kairos.floor.forecast import HostLoad, ScheduledLoad, measured_scan_seconds
from kairos.floor.recurrence import next_occurrences
from schemas.alerts import AlertState, AlertType
from schemas.api import (
    AlertPublic,
    CommandDetailPublic,
    CommandPublic,
    DeadLetterPublic,
    DispatchLateness,
    HostDetailPublic,
    HostPublic,
    ScanResultPublic,
    SchedulerConfigPublic,
    StatusPublic,
    UpcomingScanPublic,
    WithdrawnClaimPublic,
)
from schemas.base import ComplianceState
from schemas.commands import ADAPTIVE_SCANNER
from schemas.config import SchedulerConfig
from schemas.schedules import Schedule

QUERY_TIMEOUT_SECONDS = 5.0
"""Client-side limit on one statement; the pool sets the same as statement_timeout."""

Row = dict[str, Any]


@asynccontextmanager
async def driver_errors() -> AsyncIterator[None]:
    """Translate psycopg failures and slow answers into DatabaseUnavailable, once."""
    try:
        async with asyncio.timeout(QUERY_TIMEOUT_SECONDS):
            yield
    except TimeoutError:
        raise DatabaseUnavailable(
            f"PostgreSQL did not answer within {QUERY_TIMEOUT_SECONDS:g}s"
        ) from None
    except psycopg.errors.UndefinedTable:
        raise DatabaseUnavailable(
            "the read model is not migrated; run `kairos db migrate`"
        ) from None
    except psycopg.OperationalError as error:
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise DatabaseUnavailable(f"PostgreSQL failed: {first_line}") from None


async def _rows(
    conn: psycopg.AsyncConnection, statement: str | sql.Composable, params: dict[str, Any]
) -> list[Row]:
    async with driver_errors():
        cursor = conn.cursor(row_factory=dict_row)
        await cursor.execute(statement, params)
        return await cursor.fetchall()


async def _one(
    conn: psycopg.AsyncConnection, statement: str | sql.Composable, params: dict[str, Any]
) -> Row | None:
    rows = await _rows(conn, statement, params)
    return rows[0] if rows else None


async def _count(
    conn: psycopg.AsyncConnection, statement: str | sql.Composable, params: dict[str, Any]
) -> int:
    row = await _one(conn, statement, params)
    return int(row["count"]) if row else 0


# --- scheduler -----------------------------------------------------------------------------

_CONFIG_FIELDS = frozenset(SchedulerConfig.model_fields) - {"version"}


async def get_config(conn: psycopg.AsyncConnection) -> SchedulerConfigPublic:
    """The projected config, or the documented defaults (version 0) before any change."""
    row = await _one(conn, "SELECT config, version, updated_at FROM scheduler_config", {})
    if row is None:
        return SchedulerConfigPublic()
    stored = {key: value for key, value in row["config"].items() if key in _CONFIG_FIELDS}
    return SchedulerConfigPublic(**stored, version=row["version"], updated_at=row["updated_at"])


async def in_flight_by_scanner(conn: psycopg.AsyncConnection) -> dict[str, int]:
    """Commands issued and not yet ended (no outcome projected), by scanner."""
    rows = await _rows(
        conn,
        "SELECT scanner, count(*) AS count FROM scan_commands WHERE outcome IS NULL"
        " GROUP BY scanner",
        {},
    )
    return {row["scanner"]: int(row["count"]) for row in rows}


_SCANNABLE = "NOT maintenance_mode AND NOT deleted AND is_active AND status = 'up'"
_DUE = f"{_SCANNABLE} AND next_scheduled_scan <= %(now)s"
"""Its scan time has come; with in_flight_command_id set it is queued or running."""
_WAITING = "in_flight_command_id IS NULL"
_OVERDUE = f"{_DUE} AND {_WAITING}"
"""Due, yet no worker has claimed it: the scheduler is paused, or a worker is behind."""

OVERDUE_COUNT = f"SELECT count(*) FROM host_schedule WHERE {_OVERDUE}"
"""Served by the index host_schedule_dispatchable (migration 004)."""
DUE_SOON_COUNT = (
    f"SELECT count(*) FROM host_schedule WHERE {_SCANNABLE}"
    " AND next_scheduled_scan > %(now)s AND next_scheduled_scan < %(until)s"
)
"""Served by the index host_schedule_scannable (migration 006)."""


_PROMISE_KEPT_FOR = "NOT maintenance_mode AND NOT deleted AND is_active"
PAST_PROMISE_COUNT = (
    f"SELECT count(*) FROM host_schedule WHERE {_PROMISE_KEPT_FOR}"
    " AND COALESCE(last_scan_completed, created_at) < %(promised_since)s"
)
"""Served by the index host_schedule_promise (migration 008)."""
UPCOMING = (
    "SELECT host_id, hostname, state, next_scheduled_scan AS due_at, scan_priority AS priority"
    f" FROM host_schedule WHERE {_SCANNABLE} AND {_WAITING}"
    " ORDER BY next_scheduled_scan, scan_priority DESC, host_id LIMIT %(limit)s"
)
"""Served by the index host_schedule_dispatchable (migration 004) in due order."""


CLAIMS_WAITING_COUNT = (
    "SELECT count(*) FROM host_schedule h WHERE in_flight_command_id IS NOT NULL"
    " AND NOT EXISTS (SELECT 1 FROM scan_commands c WHERE c.command_id = h.in_flight_command_id)"
)
"""Hosts whose claim has no issued command yet: served by the partial index
host_schedule_claimed (migration 014) and scan_commands' key."""


async def get_status(
    conn: psycopg.AsyncConnection, *, now: datetime, upcoming: int = 10
) -> StatusPublic:
    """Counters, range counts over the due index and the next hosts due: no full scan."""
    config = await get_config(conn)
    states = await _rows(conn, "SELECT state, hosts FROM host_state_counts", {})
    flags = {
        row["flag"]: int(row["hosts"])
        for row in await _rows(conn, "SELECT flag, hosts FROM host_flag_counts", {})
    }
    by_state = {state.value: 0 for state in ComplianceState}
    by_state.update({row["state"]: int(row["hosts"]) for row in states})
    overdue = await _count(conn, OVERDUE_COUNT, {"now": now})
    waiting = await _count(conn, CLAIMS_WAITING_COUNT, {})
    due_next_hour = await _count(
        conn, DUE_SOON_COUNT, {"now": now, "until": now + timedelta(hours=1)}
    )
    promised_since = now - timedelta(minutes=config.max_interval_minutes)
    past_promise = await _count(conn, PAST_PROMISE_COUNT, {"promised_since": promised_since})
    next_hosts = await _rows(conn, UPCOMING, {"limit": upcoming}) if upcoming else []
    unmatched = await _count(conn, UNMATCHED_COUNT, {})
    lag, backlog, applied_at = await get_projection_lag(conn)
    return StatusPublic(
        enabled=config.enabled,
        config_version=config.version,
        hosts_total=sum(by_state.values()),
        by_state=by_state,
        in_flight=flags.get("in_flight", 0),
        waiting=waiting,
        held=0 if config.enabled else waiting,
        maintenance=flags.get("maintenance", 0),
        inactive=flags.get("inactive", 0),
        down=flags.get("down", 0),
        overdue=overdue,
        past_promise=past_promise,
        upcoming=[UpcomingScanPublic(**row) for row in next_hosts],
        due_next_hour=due_next_hour,
        unmatched_results=unmatched,
        max_concurrent_scans=config.max_concurrent_scans,
        dispatch_lateness=await get_dispatch_lateness(conn, now=now),
        projection_lag_seconds=lag,
        projection_backlog=backlog,
        projection_applied_at=applied_at,
        as_of=now,
    )


LATENESS_SAMPLE = 1000
LATENESS_WINDOW = timedelta(hours=1)
DISPATCH_LATENESS = (
    "SELECT count(*) AS commands,"
    " percentile_disc(0.5) WITHIN GROUP (ORDER BY lateness) AS p50_seconds,"
    " percentile_disc(0.99) WITHIN GROUP (ORDER BY lateness) AS p99_seconds,"
    " max(lateness) AS max_seconds"
    " FROM (SELECT extract(epoch FROM issued_at - due_at)::float8 AS lateness"
    " FROM scan_commands WHERE issued_at > %(since)s AND issued_at <= %(now)s"
    " ORDER BY issued_at DESC LIMIT %(sample)s) AS newest"
)
"""Served by the index scan_commands_issued (migration 011): at most 1,000 rows read."""


async def get_dispatch_lateness(
    conn: psycopg.AsyncConnection, *, now: datetime
) -> DispatchLateness | None:
    """Lateness of the newest commands issued within the hour; None if there was none."""
    params = {"since": now - LATENESS_WINDOW, "now": now, "sample": LATENESS_SAMPLE}
    [row] = await _rows(conn, DISPATCH_LATENESS, params)
    return DispatchLateness(**row) if row["commands"] else None


UNMATCHED_COUNT = "SELECT count(*) FROM scan_results WHERE NOT matched"
"""Served by the partial index scan_results_unmatched (migration 009)."""
NEVER_SCANNED_COUNT = (
    "SELECT count(*) FROM host_schedule"
    " WHERE NOT deleted AND last_scan_completed IS NULL AND in_flight_command_id IS NULL"
)


async def count_hosts_to_initialize(conn: psycopg.AsyncConnection) -> int:
    """Hosts POST /initialize re-plans: never scanned successfully, no command in flight."""
    return await _count(conn, NEVER_SCANNED_COUNT, {})


async def get_projection_lag(
    conn: psycopg.AsyncConnection,
) -> tuple[float | None, int | None, datetime | None]:
    """(lag in seconds, messages not yet projected, last write) over every source: the worst
    lag, the backlogs summed.

    The projector records a row per topic partition it reads (migration 013; one row for all
    before), with `lag_seconds` (its clock minus the newest event applied) and `consumer_lag`
    (messages behind) from migration 003 on; before that the lag is the gap between
    `applied_at` and `newest_event_at`.
    """
    rows = await _rows(conn, "SELECT * FROM projection_progress", {})
    if not rows:
        return None, None, None
    lags = [
        float(row["lag_seconds"])
        if row.get("lag_seconds") is not None
        else (row["applied_at"] - row["newest_event_at"]).total_seconds()
        for row in rows
        if row.get("lag_seconds") is not None or row.get("newest_event_at") is not None
    ]
    backlog = [int(row["consumer_lag"]) for row in rows if row.get("consumer_lag") is not None]
    return (
        max(0.0, max(lags)) if lags else None,
        sum(backlog) if backlog else None,
        max(row["applied_at"] for row in rows),
    )


async def check_read_model(conn: psycopg.AsyncConnection) -> None:
    """Raise DatabaseUnavailable unless PostgreSQL answers and the schema is migrated."""
    await _rows(conn, "SELECT 1 FROM api_tokens LIMIT 0", {})


# --- hosts ---------------------------------------------------------------------------------

_HOST_COLUMNS = sql.SQL(", ").join(
    sql.Identifier(name) for name in HostPublic.model_fields if name != "labels"
)


def _host(row: Row) -> HostPublic:
    return HostPublic(**row)


async def list_hosts_due(
    conn: psycopg.AsyncConnection, *, now: datetime, limit: int
) -> tuple[list[HostPublic], int]:
    """Hosts waiting for a scan, in dispatch order: priority desc, next_scheduled_scan asc."""
    rows = await _rows(
        conn,
        sql.SQL(
            "SELECT {columns}, labels FROM host_schedule WHERE "
            + _DUE
            + " ORDER BY scan_priority DESC, next_scheduled_scan ASC, host_id LIMIT %(limit)s"
        ).format(columns=_HOST_COLUMNS),
        {"now": now, "limit": limit},
    )
    count = await _count(
        conn,
        "SELECT count(*) FROM host_schedule WHERE " + _DUE,
        {"now": now},
    )
    return [_host(row) for row in rows], count


async def list_hosts(
    conn: psycopg.AsyncConnection,
    *,
    now: datetime,
    state: ComplianceState | None = None,
    maintenance: bool | None = None,
    overdue: bool | None = None,
    labels: dict[str, str] | None = None,
    organization: str | None = None,
    failing: bool | None = None,
    after: CursorKey | None = None,
    limit: int,
) -> tuple[list[HostPublic], int]:
    """Hosts matching every filter given, by host_id, from after `after`."""
    where = [sql.SQL("NOT deleted")]
    params: dict[str, Any] = {"now": now, "limit": limit}
    if state is not None:
        where.append(sql.SQL("state = %(state)s"))
        params["state"] = state.value
    if maintenance is not None:
        where.append(sql.SQL("maintenance_mode = %(maintenance)s"))
        params["maintenance"] = maintenance
    if overdue is not None:
        condition = sql.SQL(f"({_OVERDUE})")
        where.append(condition if overdue else sql.SQL("NOT ") + condition)
    if labels:
        where.append(sql.SQL("labels @> %(labels)s"))
        params["labels"] = psycopg.types.json.Jsonb(labels)
    if organization is not None:
        where.append(sql.SQL("organization = %(organization)s"))
        params["organization"] = organization
    if failing is not None:
        where.append(
            sql.SQL("consecutive_scan_failures > 0" if failing else "consecutive_scan_failures = 0")
        )
    filters = sql.SQL(" AND ").join(where)
    given = {name for name in ("state", "maintenance") if name in params}
    plain = overdue is None and failing is None and not labels and organization is None
    if plain and len(given) <= 1:
        count = await _count_from_counters(conn, state=state, maintenance=maintenance)
    else:
        count = await _count(
            conn, sql.SQL("SELECT count(*) FROM host_schedule WHERE {}").format(filters), params
        )
    if after is not None:
        where.append(sql.SQL("host_id > %(after)s"))
        params["after"] = after[0]
    rows = await _rows(
        conn,
        sql.SQL(
            "SELECT {columns}, labels FROM host_schedule WHERE {filters}"
            " ORDER BY host_id LIMIT %(limit)s"
        ).format(columns=_HOST_COLUMNS, filters=sql.SQL(" AND ").join(where)),
        params,
    )
    return [_host(row) for row in rows], count


async def _count_from_counters(
    conn: psycopg.AsyncConnection, *, state: ComplianceState | None, maintenance: bool | None
) -> int:
    """Hosts in one state, in or out of maintenance, or all: the projector's counters, so
    the first page of a million hosts does not count a million rows."""
    total = "(SELECT coalesce(sum(hosts), 0) FROM host_state_counts)"
    in_maintenance = (
        "(SELECT coalesce(sum(hosts), 0) FROM host_flag_counts WHERE flag = 'maintenance')"
    )
    if state is not None:
        statement = (
            "SELECT coalesce(sum(hosts), 0) AS count FROM host_state_counts WHERE state = %(state)s"
        )
    elif maintenance is True:
        statement = f"SELECT {in_maintenance} AS count"
    elif maintenance is False:
        statement = f"SELECT {total} - {in_maintenance} AS count"
    else:
        statement = f"SELECT {total} AS count"
    return await _count(conn, statement, {"state": state.value if state else None})


_DETAIL_COLUMNS = sql.SQL(", ").join(
    sql.Identifier(name) for name in HostDetailPublic.model_fields if name != "latest_scan"
)
_SCAN_COLUMNS = sql.SQL(", ").join(
    sql.Identifier(name)
    for name in ScanResultPublic.model_fields
    if name not in ("kind", "reported_status")
)


def _scan(row: Row) -> ScanResultPublic:
    """A stored result; one naming no issued command shows as `unmatched`, never a success."""
    if row["matched"]:
        return ScanResultPublic(**row)
    return ScanResultPublic(**{**row, "status": "unmatched", "reported_status": row["status"]})


_COMMAND_COLUMNS = sql.SQL(", ").join(
    sql.Identifier(name) for name in CommandPublic.model_fields if name != "kind"
)


async def get_host(conn: psycopg.AsyncConnection, *, host_id: str) -> HostDetailPublic | None:
    """A host's schedule and its newest compliance result; None if unknown or deleted."""
    row = await _one(
        conn,
        sql.SQL(
            "SELECT {columns} FROM host_schedule WHERE host_id = %(host_id)s AND NOT deleted"
        ).format(columns=_DETAIL_COLUMNS),
        {"host_id": host_id},
    )
    if row is None:
        return None
    scan = await _one(
        conn,
        sql.SQL(
            "SELECT {columns} FROM scan_results WHERE host_id = %(host_id)s"
            " AND scanner = %(scanner)s AND matched ORDER BY completed_at DESC LIMIT 1"
        ).format(columns=_SCAN_COLUMNS),
        {"host_id": host_id, "scanner": ADAPTIVE_SCANNER},
    )
    return HostDetailPublic(**row, latest_scan=_scan(scan) if scan else None)


async def get_host_attributes(
    conn: psycopg.AsyncConnection, *, host_id: str
) -> dict[str, Any] | None:
    """What inventory last said of a host (`ObjectAttributes` fields), with its current
    status; None if unknown or deleted."""
    row = await _one(
        conn,
        "SELECT attributes, hostname, organization, labels, status FROM host_schedule"
        " WHERE host_id = %(host_id)s AND NOT deleted",
        {"host_id": host_id},
    )
    if row is None:
        return None
    return {
        **(row["attributes"] or {}),
        "hostname": row["hostname"],
        "organization": row["organization"],
        "labels": row["labels"] or {},
        "status": row["status"],
    }


async def list_host_history(
    conn: psycopg.AsyncConnection, *, host_id: str, after: CursorKey | None, limit: int
) -> tuple[list[HistoryEntry], int]:
    """Results, commands and withdrawn claims of one host merged newest first; key (at, kind,
    id) descending."""
    params: dict[str, Any] = {"host_id": host_id, "limit": limit}
    page_filter = sql.SQL("")
    if after is not None:
        page_filter = sql.SQL("WHERE (at, kind, id) < (%(at)s, %(kind)s, %(id)s)")
        params.update(at=after[0], kind=after[1], id=after[2])
    entries = await _rows(
        conn,
        sql.SQL(
            "SELECT kind, id FROM ("
            " SELECT 'scan' AS kind, event_id::text AS id, completed_at AS at"
            " FROM scan_results WHERE host_id = %(host_id)s"
            " UNION ALL"
            " SELECT 'command', command_id, issued_at FROM scan_commands"
            " WHERE host_id = %(host_id)s"
            " UNION ALL"
            " SELECT 'withdrawn', command_id, withdrawn_at FROM command_withdrawals"
            " WHERE host_id = %(host_id)s"
            ") entries {page_filter} ORDER BY at DESC, kind DESC, id DESC LIMIT %(limit)s"
        ).format(page_filter=page_filter),
        params,
    )
    scan_ids = [entry["id"] for entry in entries if entry["kind"] == "scan"]
    command_ids = [entry["id"] for entry in entries if entry["kind"] == "command"]
    scans = (
        {
            str(row["event_id"]): _scan(row)
            for row in await _rows(
                conn,
                sql.SQL("SELECT {} FROM scan_results WHERE event_id = ANY(%(ids)s::uuid[])").format(
                    _SCAN_COLUMNS
                ),
                {"ids": scan_ids},
            )
        }
        if scan_ids
        else {}
    )
    commands = (
        {
            row["command_id"]: CommandPublic(**row)
            for row in await _rows(
                conn,
                sql.SQL("SELECT {} FROM scan_commands WHERE command_id = ANY(%(ids)s)").format(
                    _COMMAND_COLUMNS
                ),
                {"ids": command_ids},
            )
        }
        if command_ids
        else {}
    )
    count = await _count(
        conn,
        "SELECT (SELECT count(*) FROM scan_results WHERE host_id = %(host_id)s)"
        " + (SELECT count(*) FROM scan_commands WHERE host_id = %(host_id)s)"
        " + (SELECT count(*) FROM command_withdrawals WHERE host_id = %(host_id)s) AS count",
        {"host_id": host_id},
    )
    withdrawn_ids = [entry["id"] for entry in entries if entry["kind"] == "withdrawn"]
    withdrawn = (
        {
            row["command_id"]: WithdrawnClaimPublic(**row)
            for row in await _rows(
                conn,
                "SELECT command_id, host_id, reason, withdrawn_at FROM command_withdrawals"
                " WHERE command_id = ANY(%(ids)s)",
                {"ids": withdrawn_ids},
            )
        }
        if withdrawn_ids
        else {}
    )
    items: list[HistoryEntry] = [
        scans[entry["id"]]
        if entry["kind"] == "scan"
        else commands[entry["id"]]
        if entry["kind"] == "command"
        else withdrawn[entry["id"]]
        for entry in entries
    ]
    return items, count


HistoryEntry = ScanResultPublic | CommandPublic | WithdrawnClaimPublic


def history_key(entry: HistoryEntry) -> CursorKey:
    if isinstance(entry, ScanResultPublic):
        return (entry.completed_at, "scan", str(entry.event_id))
    if isinstance(entry, WithdrawnClaimPublic):
        return (entry.withdrawn_at, "withdrawn", entry.command_id)
    return (entry.issued_at, "command", entry.command_id)


# --- commands and dead letters -------------------------------------------------------------


async def get_command(
    conn: psycopg.AsyncConnection, *, command_id: str
) -> CommandDetailPublic | None:
    row = await _one(
        conn,
        sql.SQL("SELECT {} FROM scan_commands WHERE command_id = %(command_id)s").format(
            _COMMAND_COLUMNS
        ),
        {"command_id": command_id},
    )
    if row is None:
        return None
    results = await _rows(
        conn,
        sql.SQL(
            "SELECT {} FROM scan_results WHERE command_id = %(command_id)s"
            " ORDER BY completed_at DESC"
        ).format(_SCAN_COLUMNS),
        {"command_id": command_id},
    )
    return CommandDetailPublic(**row, results=[_scan(result) for result in results])


_DEAD_LETTER_COLUMNS = sql.SQL(", ").join(
    sql.Identifier(name) for name in DeadLetterPublic.model_fields
)


async def list_dead_letters(
    conn: psycopg.AsyncConnection, *, after: CursorKey | None, limit: int
) -> tuple[list[DeadLetterPublic], int]:
    """Dead letters newest first; key (received_at, event_id) descending."""
    params: dict[str, Any] = {"limit": limit}
    page_filter = sql.SQL("")
    if after is not None:
        page_filter = sql.SQL("WHERE (received_at, event_id) < (%(at)s, %(id)s::uuid)")
        params.update(at=after[0], id=after[1])
    rows = await _rows(
        conn,
        sql.SQL(
            "SELECT {columns} FROM dead_letters {page_filter}"
            " ORDER BY received_at DESC, event_id DESC LIMIT %(limit)s"
        ).format(columns=_DEAD_LETTER_COLUMNS, page_filter=page_filter),
        params,
    )
    count = await _count(conn, "SELECT count(*) FROM dead_letters", {})
    return [DeadLetterPublic(**row) for row in rows], count


async def list_alerts(
    conn: psycopg.AsyncConnection,
    *,
    state: AlertState | None,
    alert_type: AlertType | None,
    subject_id: str | None,
    after: CursorKey | None,
    limit: int,
) -> tuple[list[AlertPublic], int, int]:
    """Alerts newest first, key (raised_at, alert_id) descending; and how many match and fire."""
    params: dict[str, Any] = {"limit": limit}
    conditions = []
    if state is AlertState.FIRING:
        conditions.append("resolved_at IS NULL")
    elif state is AlertState.RESOLVED:
        conditions.append("resolved_at IS NOT NULL")
    if alert_type is not None:
        conditions.append("alert_type = %(type)s")
        params["type"] = alert_type.value
    if subject_id is not None:
        conditions.append("subject_id = %(subject)s")
        params["subject"] = subject_id
    matching = " AND ".join(conditions) or "true"
    page = matching
    if after is not None:
        page += " AND (raised_at, alert_id) < (%(at)s, %(id)s::uuid)"
        params.update(at=after[0], id=after[1])
    rows = await _rows(
        conn,
        "SELECT alert_id, alert_type, subject_type, subject_id, severity, summary, details,"
        " raised_at, resolved_at, resolution,"
        " CASE WHEN resolved_at IS NULL THEN 'firing' ELSE 'resolved' END AS state"
        f" FROM alerts WHERE {page} ORDER BY raised_at DESC, alert_id DESC LIMIT %(limit)s",
        params,
    )
    count = await _count(conn, f"SELECT count(*) FROM alerts WHERE {matching}", params)
    firing = await _count(conn, "SELECT count(*) FROM alerts WHERE resolved_at IS NULL", {})
    return [AlertPublic(**row) for row in rows], count, firing


def alert_key(alert: AlertPublic) -> CursorKey:
    return (alert.raised_at, str(alert.alert_id))


def dead_letter_key(letter: DeadLetterPublic) -> CursorKey:
    return (letter.received_at, str(letter.event_id))


def host_key(host: HostPublic) -> CursorKey:
    return (host.host_id,)


# --- generic schedules (scheduled jobs) ----------------------------------------------------

_SCHEDULE_SELECT = (
    "SELECT schedule_id, name, definition, status, enabled, paused, pause_note,"
    " disabled_reason, is_system, next_fire_at, last_fired_at, last_success_at, runs,"
    " skipped_runs, failed_runs, consecutive_failures, last_error, version, created_at,"
    " updated_at, incarnation, succeeded_runs, partially_failed_runs, dropped_occurrences"
    " FROM schedules"
)


async def list_schedules(
    conn: psycopg.AsyncConnection, *, limit: int, offset: int
) -> tuple[list[Row], int]:
    """Live schedules by name, one page, and how many there are."""
    rows = await _rows(
        conn,
        _SCHEDULE_SELECT + " WHERE NOT deleted ORDER BY name LIMIT %(limit)s OFFSET %(offset)s",
        {"limit": limit, "offset": offset},
    )
    count = await _count(conn, "SELECT count(*) FROM schedules WHERE NOT deleted", {})
    return rows, count


async def get_schedule(conn: psycopg.AsyncConnection, *, name: str) -> Row | None:
    return await _one(
        conn, _SCHEDULE_SELECT + " WHERE name = %(name)s AND NOT deleted", {"name": name}
    )


REFUSED_PREFIXES = ("stale write", "schedule exists")
"""How the worker's refusals of a schedule write begin (`streams.policy.schedules`)."""


async def refused_schedule_changes(
    conn: psycopg.AsyncConnection, *, schedule_id: str, limit: int = 10, event_id: str | None = None
) -> list[Row]:
    """A schedule's changes the worker refused, newest first: dead letters under its key
    whose reason is a refused write (served by dead_letters_key, migration 018)."""
    params: dict[str, Any] = {
        "key": schedule_id,
        "limit": limit,
        "patterns": [f"{prefix}:%" for prefix in REFUSED_PREFIXES],
        "event": f'%"event_id":"{event_id}"%' if event_id else "%",
    }
    return await _rows(
        conn,
        "SELECT event_id, error, raw, received_at FROM dead_letters"
        " WHERE key = %(key)s AND error LIKE ANY(%(patterns)s) AND raw LIKE %(event)s"
        " ORDER BY received_at DESC LIMIT %(limit)s",
        params,
    )


_RUNS_OF = "schedule_runs WHERE schedule_id = %(id)s AND incarnation = %(incarnation)s"
"""The runs of one incarnation: a schedule created again under a deleted one's name has its own."""


async def list_schedule_runs(
    conn: psycopg.AsyncConnection,
    *,
    schedule_id: str,
    incarnation: str,
    limit: int,
    offset: int = 0,
) -> tuple[list[Row], int]:
    """The latest runs of one incarnation of a schedule, newest first (skipping `offset`), and
    how many it has had."""
    params = {"id": schedule_id, "incarnation": incarnation, "limit": limit, "offset": offset}
    rows = await _rows(
        conn,
        "SELECT occurrence, attempt, reason, fired_at, outcome, error, hosts_matched,"
        " commands_issued, commands_succeeded, commands_failed, skip_reason, skipped_hosts"
        f" FROM {_RUNS_OF} ORDER BY fired_at DESC, occurrence DESC, attempt DESC"
        " LIMIT %(limit)s OFFSET %(offset)s",
        params,
    )
    count = await _count(conn, f"SELECT count(*) FROM {_RUNS_OF}", params)
    return rows, count


_RUN_OUTCOMES = ("fired", "skipped", "succeeded", "partially_failed", "failed", "dropped")


async def schedule_run_stats(
    conn: psycopg.AsyncConnection, *, schedule_id: str, incarnation: str
) -> Row:
    """Runs of one schedule by outcome: total and one count per outcome."""
    counts = ", ".join(
        f"count(*) FILTER (WHERE outcome = '{outcome}') AS {outcome}" for outcome in _RUN_OUTCOMES
    )
    row = await _one(
        conn,
        f"SELECT count(*) AS total, {counts} FROM {_RUNS_OF}",
        {"id": schedule_id, "incarnation": incarnation},
    )
    return row or {"total": 0, **dict.fromkeys(_RUN_OUTCOMES, 0)}


# --- capacity forecast ---------------------------------------------------------------------

FORECAST_DURATIONS_MEASURED = 1000
"""The newest successful scans whose durations give the forecast's p50 and p90."""


async def forecast_inputs(
    conn: psycopg.AsyncConnection, *, now: datetime, hours: int
) -> dict[str, Any]:
    """What `kairos.floor.forecast.forecast` needs, read from the read model.

    Hosts: every scannable host (a host with a command in flight counts as due at its
    scheduled time: a little pessimistic). Schedules: each enabled, unpaused schedule's
    occurrences in the horizon, with as many commands as its latest run matched hosts (its
    static ids before it has run). Durations: the newest successful scans, each from its
    `started_at`, or from its command's `issued_at` when the agent sent none. The promise is
    `max_interval_minutes` (48 h by default), as `/status`'s past_promise counts it.
    """
    hosts = [
        HostLoad(
            host_id=row["host_id"],
            due_at=row["next_scheduled_scan"],
            interval=timedelta(minutes=max(int(row["current_interval_minutes"] or 0), 1)),
            last_scan_completed=row["last_scan_completed"],
            priority=int(row["scan_priority"] or 5),
        )
        for row in await _rows(
            conn,
            "SELECT host_id, next_scheduled_scan, current_interval_minutes, last_scan_completed,"
            f" scan_priority FROM host_schedule WHERE {_SCANNABLE}"
            " AND next_scheduled_scan IS NOT NULL",
            {},
        )
    ]
    # Agents that send no `started_at` are measured from their command's issue instead.
    measured = (
        measured_scan_seconds(
            row["completed_at"], started_at=row["started_at"], issued_at=row["issued_at"]
        )
        for row in await _rows(
            conn,
            "SELECT r.completed_at, r.started_at, c.issued_at FROM scan_results r"
            " LEFT JOIN scan_commands c ON c.command_id = r.command_id"
            " WHERE r.status = 'succeeded'"
            " AND r.completed_at > coalesce(r.started_at, c.issued_at)"
            " ORDER BY r.completed_at DESC LIMIT %(limit)s",
            {"limit": FORECAST_DURATIONS_MEASURED},
        )
    )
    durations = [seconds for seconds in measured if seconds is not None]
    config = await get_config(conn)
    return {
        "hosts": hosts,
        "scheduled": await _scheduled_load(conn, now=now, hours=hours),
        "max_concurrent_scans": config.max_concurrent_scans,
        "scan_seconds": durations,
        "promise": timedelta(minutes=config.max_interval_minutes),
        "promise_guard": timedelta(minutes=config.promise_guard_minutes),
    }


async def _scheduled_load(
    conn: psycopg.AsyncConnection, *, now: datetime, hours: int
) -> list[ScheduledLoad]:
    rows = await _rows(
        conn,
        "SELECT s.schedule_id, s.definition, s.runs, r.hosts_matched FROM schedules s"
        " LEFT JOIN LATERAL (SELECT hosts_matched FROM schedule_runs"
        " WHERE schedule_id = s.schedule_id AND incarnation = s.incarnation"
        " AND outcome <> 'dropped' ORDER BY fired_at DESC LIMIT 1) r ON true"
        " WHERE NOT s.deleted AND s.enabled AND NOT s.paused",
        {},
    )
    horizon = now + timedelta(hours=hours)
    loads = []
    for row in rows:
        schedule = Schedule.model_validate(row["definition"])
        commands = row["hosts_matched"]
        if commands is None:
            commands = len(schedule.targets.object_ids or ())
        if not commands:
            continue
        upcoming = next_occurrences(
            schedule, now, count=FORECAST_OCCURRENCES, runs_so_far=int(row["runs"])
        )
        loads.extend(
            ScheduledLoad(row["schedule_id"], o.fire_at, int(commands), schedule.priority)
            for o in upcoming
            if o.fire_at < horizon
        )
    return loads


FORECAST_OCCURRENCES = 2_000
"""Occurrences per schedule the forecast looks at (a schedule every minute fills 33 h)."""
