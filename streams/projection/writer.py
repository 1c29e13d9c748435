"""`apply(changes, conn)`: one batch of decoded changes into PostgreSQL, in one transaction.

Every write is idempotent: host rows are guarded by their version, results, commands and
dead letters by their ids, so a replayed or reordered batch never overwrites newer state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import psycopg
from psycopg import postgres
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.types.json import Jsonb
from pydantic import TypeAdapter

from schemas.commands import DeadLetter, ScanCommand
from schemas.internal import CommandTimedOut, ConfigPublished
from schemas.objects import HostLabels
from schemas.results import ScanCompleted
from schemas.schedules import ScheduleRunRecorded, ScheduleStateChanged
from schemas.state import HostSchedule, HostStateChanged
from streams.policy.schedules import schedule_status
from streams.projection import alerts, command_runs
from streams.projection.alerts import AlertCounts

Change = (
    HostStateChanged
    | ScanCompleted
    | ScanCommand
    | DeadLetter
    | CommandTimedOut
    | ConfigPublished
    | ScheduleStateChanged
    | ScheduleRunRecorded
)

FLAGS = ("in_flight", "maintenance", "inactive", "down")


def event_time(change: Change) -> datetime | None:
    """When `change` happened, in scheduler time: what projection lag is measured from (a
    config has no time of its own)."""
    if isinstance(change, HostStateChanged | ScheduleStateChanged):
        return change.changed_at
    if isinstance(change, ScanCompleted):
        return change.completed_at
    if isinstance(change, ScanCommand):
        return change.issued_at
    if isinstance(change, CommandTimedOut):
        return change.deadline
    if isinstance(change, DeadLetter):
        return change.received_at
    if isinstance(change, ScheduleRunRecorded):
        return change.fired_at
    return None


_HOST_COLUMN_TYPES_BY_NAME = {
    "host_id": "text", "state": "text", "compliance_state": "text", "score": "float8",
    "current_interval_minutes": "int4", "next_scheduled_scan": "timestamptz",
    "last_scan_completed": "timestamptz", "last_scan_id": "text", "last_error": "text",
    "maintenance_mode": "bool", "maintenance_until": "timestamptz", "scan_priority": "int4",
    "consecutive_scan_failures": "int4", "in_flight_command_id": "text", "is_active": "bool",
    "status": "text", "hostname": "text", "organization": "text", "attributes": "jsonb",
    "labels": "jsonb", "version": "int8", "deleted": "bool", "created_at": "timestamptz",
    "updated_at": "timestamptz",
}  # fmt: skip
"""The `host_schedule` columns a host row fills, in `_host_row`'s order, with their types: a
binary COPY sends each value in its column's binary form, which psycopg formats in C (4 µs a
row against 10 µs as text, offline)."""
_HOST_COLUMNS = tuple(_HOST_COLUMN_TYPES_BY_NAME)
_HOST_COLUMN_TYPES = tuple(_HOST_COLUMN_TYPES_BY_NAME.values())

# A batch's host rows are copied into a temporary table and upserted by one statement, not
# one upsert per row: less of the projector's time per row (bench/README.md, "The projector:
# the collector's pace, host rows by COPY, alert rows in steps").
_INCOMING_HOSTS = (
    "CREATE TEMPORARY TABLE IF NOT EXISTS host_schedule_incoming"
    " (LIKE host_schedule INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
)
_COPY_HOSTS = f"COPY host_schedule_incoming ({', '.join(_HOST_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
_UPSERT_HOSTS = (
    f"INSERT INTO host_schedule ({', '.join(_HOST_COLUMNS)}) "
    f"SELECT {', '.join(_HOST_COLUMNS)} FROM host_schedule_incoming ORDER BY host_id "
    "ON CONFLICT (host_id) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in _HOST_COLUMNS[1:])
    + " WHERE excluded.version > host_schedule.version"
    # A host created again starts over at version 1 but was created after the row's host.
    " OR excluded.created_at > host_schedule.created_at"
)


class _Incoming(NamedTuple):
    """A batch's rows of one append-only table, copied in and inserted by one statement.

    An INSERT per row (psycopg's `executemany`, pipelined) took 70 % of the projector's active
    time in `bench throughput --scale 40000` (py-spy); a row already there is left as it is, as
    `ON CONFLICT DO NOTHING` left it row by row."""

    name: str
    """The temporary table's: its rows last until the batch's transaction ends."""
    create: str
    copy: str
    types: tuple[str, ...]
    insert_new: str


def _incoming(table: str, key: str, types_by_name: dict[str, str]) -> _Incoming:
    columns = ", ".join(types_by_name)
    incoming = f"{table}_incoming"
    return _Incoming(
        name=incoming,
        create=f"CREATE TEMPORARY TABLE IF NOT EXISTS {incoming}"
        f" (LIKE {table} INCLUDING DEFAULTS, position int4 NOT NULL) ON COMMIT DELETE ROWS",
        copy=f"COPY {incoming} ({columns}, position) FROM STDIN (FORMAT BINARY)",
        types=(*types_by_name.values(), "int4"),
        # In the batch's order, so that of two rows with one key the first is kept.
        insert_new=f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {incoming}"
        f" ORDER BY position ON CONFLICT ({key}) DO NOTHING",
    )


_RESULTS = _incoming(
    "scan_results",
    "event_id",
    {
        "event_id": "uuid", "command_id": "text", "host_id": "text", "scanner": "text",
        "status": "text", "started_at": "timestamptz", "completed_at": "timestamptz",
        "score": "float8", "passed": "int4", "failed": "int4",
        "severity_critical_failed": "int4", "severity_high_failed": "int4",
        "severity_medium_failed": "int4", "severity_low_failed": "int4", "scan_id": "text",
        "error": "text",
    },
)  # fmt: skip
"""`_result_row`'s columns, in its order."""
_COMMANDS = _incoming(
    "scan_commands",
    "command_id",
    {
        "command_id": "text", "host_id": "text", "scanner": "text", "priority": "int4",
        "reason": "text", "state": "text", "due_at": "timestamptz", "issued_at": "timestamptz",
        "deadline": "timestamptz", "attempt": "int4", "schedule_id": "text",
    },
)  # fmt: skip
"""`_command_row`'s columns, in its order."""
_OUTCOME = "CASE r.status WHEN 'succeeded' THEN 'completed' ELSE 'failed' END"
"""A command's outcome, from the status of a result `r`."""


async def _copy_incoming(
    cursor: psycopg.AsyncCursor[Any], incoming: _Incoming, rows: list[tuple[Any, ...]]
) -> None:
    await cursor.execute(incoming.create)
    async with cursor.copy(incoming.copy) as copy:
        copy.set_types(incoming.types)
        for position, row in enumerate(rows):
            await copy.write_row((*row, position))


_labels_json: TypeAdapter[dict[str, str]] = TypeAdapter(HostLabels)


class _JsonTextDumper(Dumper):
    """A jsonb column's binary input from JSON text already written: its format's version
    byte, then the text. psycopg's own jsonb dumper would encode the text again, as a JSON
    string."""

    format = Format.BINARY
    oid = postgres.types["jsonb"].oid

    def dump(self, obj: str) -> bytes:
        return b"\x01" + obj.encode()


_DELETE_HOST = (
    "UPDATE host_schedule SET deleted = true, in_flight_command_id = NULL, version = %s,"
    " updated_at = %s WHERE host_id = %s AND version < %s"
)


@dataclass
class BatchSummary:
    """What one applied batch did: the changes it applied and the alerts it changed."""

    applied: int = 0
    alerts: AlertCounts = field(default_factory=AlertCounts)


async def apply(
    changes: Sequence[Change],
    conn: psycopg.AsyncConnection,
    also: Callable[[BatchSummary], Awaitable[None]] | None = None,
) -> BatchSummary:
    """Write `changes` in one transaction; the caller commits offsets only after this returns.

    `also` writes more in the same transaction, once the batch is written (the projector's
    progress row): one commit a batch, which is one WAL flush where PostgreSQL syncs them."""
    summary = BatchSummary()
    async with conn.transaction():
        host_changes = _last_incarnation([c for c in changes if isinstance(c, HostStateChanged)])
        hosts = _latest_per_host(host_changes)
        applied = await _apply_hosts(conn, hosts)
        current = [
            _with_deletion_version(change, applied.deletions)
            for change in host_changes
            if change.host_id not in applied.replayed
            and not (_is_tombstone(change) and change.host_id not in applied.deletions)
        ]
        summary.alerts.add(
            await alerts.apply_host_alerts(conn, current, applied.held, applied.created_again)
        )
        summary.applied += len(hosts)
        await _apply_withdrawals(conn, host_changes)
        await _apply_commands(conn, [c for c in changes if isinstance(c, ScanCommand)], summary)
        await _apply_results(conn, [c for c in changes if isinstance(c, ScanCompleted)], summary)
        await _apply_timeouts(conn, [c for c in changes if isinstance(c, CommandTimedOut)], summary)
        await _apply_dead_letters(conn, [c for c in changes if isinstance(c, DeadLetter)], summary)
        configs = [c for c in changes if isinstance(c, ConfigPublished)]
        if configs:
            await _apply_config(conn, max(configs, key=lambda c: c.config.version), summary)
        schedules = [c for c in changes if isinstance(c, ScheduleStateChanged)]
        await _apply_schedules(conn, schedules, summary)
        summary.alerts.add(await alerts.apply_schedule_alerts(conn, schedules))
        runs = [c for c in changes if isinstance(c, ScheduleRunRecorded)]
        await _apply_schedule_runs(conn, runs, summary)
        await command_runs.link_occurrences(
            conn, [c for c in changes if isinstance(c, ScanCommand)], runs
        )
        if also is not None:
            await also(summary)
    return summary


_INSERT_WITHDRAWAL = (
    "INSERT INTO command_withdrawals (command_id, host_id, reason, withdrawn_at)"
    " VALUES (%s, %s, %s, %s) ON CONFLICT (command_id) DO NOTHING"
)


async def _apply_withdrawals(
    conn: psycopg.AsyncConnection, changes: Iterable[HostStateChanged]
) -> None:
    """Every withdrawal the batch's changes recorded, each kept once: the change that records
    one is stamped with its instant, and later ones carry it unchanged."""
    rows = [
        (withdrawn.command_id, schedule.host_id, withdrawn.reason.value, withdrawn.at)
        for schedule in (change.schedule for change in changes)
        if schedule is not None
        and (withdrawn := schedule.last_withdrawn) is not None
        and withdrawn.at == schedule.updated_at
    ]
    if rows:
        async with conn.cursor() as cursor:
            await cursor.executemany(_INSERT_WITHDRAWAL, rows)


def _last_incarnation(changes: Iterable[HostStateChanged]) -> list[HostStateChanged]:
    """Each host's changes from its last deletion or creation on, in their order.

    A host deleted and created again starts over at version 1, so versions order the changes
    of one incarnation only; a host's changes come in the order the worker made them (one
    partition), and a deletion, or a schedule created at another time, begins a new run."""
    runs: dict[str, list[HostStateChanged]] = {}
    for change in changes:
        run = runs.setdefault(change.host_id, [])
        if run and (
            change.schedule is None
            or run[-1].schedule is None
            or change.schedule.created_at != run[-1].schedule.created_at
        ):
            run.clear()
        run.append(change)
    return [change for run in runs.values() for change in run]


def _latest_per_host(changes: Iterable[HostStateChanged]) -> list[HostStateChanged]:
    latest: dict[str, HostStateChanged] = {}
    for change in changes:
        current = latest.get(change.host_id)
        if current is None or change.version > current.version:
            latest[change.host_id] = change
    return sorted(latest.values(), key=lambda change: change.host_id)


def _is_tombstone(change: HostStateChanged) -> bool:
    """A deletion read from the hosts changelog, which carries no version (version 0)."""
    return change.schedule is None and change.version == 0


def _with_deletion_version(change: HostStateChanged, deletions: dict[str, int]) -> HostStateChanged:
    """A tombstone with the version its deletion took in the read model, for the alerts."""
    if not _is_tombstone(change):
        return change
    return change.model_copy(update={"version": deletions[change.host_id]})


class HostsApplied(NamedTuple):
    held: dict[str, tuple[int, float | None]]
    """What the read model held of each host's current incarnation: version, score."""
    replayed: set[str]
    """Hosts whose changes were of an incarnation earlier than the row's (replayed after the
    host was created again): the row is left as it is."""
    created_again: set[str]
    """Hosts whose row was of an earlier incarnation: the new one replaced it."""
    deletions: dict[str, int]
    """Hosts deleted by a tombstone, and the version the deletion took (the row's next)."""


async def _apply_hosts(
    conn: psycopg.AsyncConnection, changes: list[HostStateChanged]
) -> HostsApplied:
    """Apply the newest change of each host's incarnation."""
    if not changes:
        return HostsApplied({}, set(), set(), {})
    ids = [change.host_id for change in changes]
    # Lock in host_id order (the list is sorted) so concurrent projectors cannot deadlock.
    cursor = await conn.execute(
        "SELECT host_id, version, deleted, state, in_flight_command_id IS NOT NULL,"
        " maintenance_mode, NOT is_active, status = 'down', score, created_at"
        " FROM host_schedule WHERE host_id = ANY(%s) ORDER BY host_id FOR UPDATE",
        (ids,),
    )
    before = {row[0]: row for row in await cursor.fetchall()}
    created_again: set[str] = set()
    replayed: set[str] = set()
    deletions: dict[str, int] = {}
    state_delta: Counter[str] = Counter()
    flag_delta: Counter[str] = Counter()
    upserts: list[tuple[Any, ...]] = []
    deletes: list[tuple[Any, ...]] = []
    for change in changes:
        old = before.get(change.host_id)
        created_at = change.schedule.created_at if change.schedule is not None else None
        version = change.version
        if _is_tombstone(change):
            # It ends the incarnation the row holds, unless the row is gone already (a replay).
            if old is None or old[2]:
                continue
            ended = change.deleted_created_at
            if ended is not None and ended != old[9]:
                # An earlier incarnation's deletion, replayed after the host was created again.
                replayed.add(change.host_id)
                continue
            version = deletions[change.host_id] = old[1] + 1
        elif old is not None and created_at is not None and created_at != old[9]:
            if created_at < old[9]:
                replayed.add(change.host_id)  # An earlier incarnation's change: the row is newer.
                continue
            created_again.add(change.host_id)  # Any version of the new incarnation is newer.
        elif old is not None and old[1] >= version:
            continue  # A replay or a reordered older change: the row is newer already.
        if old is not None and not old[2]:
            state_delta[old[3]] -= 1
            for flag, was_set in zip(FLAGS, old[4:8], strict=True):
                flag_delta[flag] -= int(bool(was_set))
        schedule = change.schedule
        if schedule is None:
            if old is not None:
                deletes.append((version, change.changed_at, change.host_id, version))
            continue
        state_delta[schedule.state.value] += 1
        for flag, is_set in zip(FLAGS, _flags(schedule), strict=True):
            flag_delta[flag] += int(is_set)
        upserts.append(_host_row(schedule))
    async with conn.cursor() as cursor:
        if upserts:
            await cursor.execute(_INCOMING_HOSTS)
            cursor.adapters.register_dumper(None, _JsonTextDumper)  # This cursor's COPY only.
            async with cursor.copy(_COPY_HOSTS) as copy:
                copy.set_types(_HOST_COLUMN_TYPES)
                for row in upserts:
                    await copy.write_row(row)
            await cursor.execute(_UPSERT_HOSTS)
        if deletes:
            await cursor.executemany(_DELETE_HOST, deletes)
    await _bump(conn, "host_state_counts", "state", state_delta)
    await _bump(conn, "host_flag_counts", "flag", flag_delta)
    # What the read model held of each host's current incarnation (a host created again has
    # nothing yet, as a new one).
    held = {
        host_id: (row[1], None if row[2] else row[8])
        for host_id, row in before.items()
        if host_id not in created_again
    }
    return HostsApplied(held, replayed, created_again, deletions)


def _flags(schedule: HostSchedule) -> tuple[bool, bool, bool, bool]:
    return (
        schedule.in_flight is not None,
        schedule.maintenance_mode,
        not schedule.is_active,
        schedule.status.value == "down",
    )


def _host_row(schedule: HostSchedule) -> tuple[Any, ...]:
    attributes = schedule.attributes
    return (
        schedule.host_id,
        schedule.state.value,
        schedule.compliance_state.value,
        schedule.score,
        schedule.current_interval_minutes,
        schedule.next_scheduled_scan,
        schedule.last_scan_completed,
        schedule.last_scan_id,
        schedule.last_error,
        schedule.maintenance_mode,
        schedule.maintenance_until,
        schedule.scan_priority,
        schedule.consecutive_scan_failures,
        schedule.in_flight_command_id,
        schedule.is_active,
        schedule.status.value,
        attributes.hostname,
        attributes.organization,
        # JSON text, which the COPY sends to the jsonb columns as it is (`_JsonTextDumper`):
        # pydantic writes it in Rust, where `Jsonb` built a dict and ran `json.dumps` on it
        # (a host row cost about a third less to build and format, offline).
        attributes.model_dump_json(exclude={"labels"}),
        _labels_json.dump_json(attributes.labels).decode(),
        schedule.version,
        False,
        schedule.created_at,
        schedule.updated_at,
    )


async def _bump(
    conn: psycopg.AsyncConnection, table: str, column: str, delta: Counter[str]
) -> None:
    rows = sorted((key, amount) for key, amount in delta.items() if amount)
    if not rows:
        return
    async with conn.cursor() as cursor:
        await cursor.executemany(
            f"INSERT INTO {table} ({column}, hosts) VALUES (%s, %s) "
            f"ON CONFLICT ({column}) DO UPDATE SET hosts = {table}.hosts + excluded.hosts",
            rows,
        )


async def _apply_results(
    conn: psycopg.AsyncConnection, results: list[ScanCompleted], summary: BatchSummary
) -> None:
    if not results:
        return
    async with conn.cursor() as cursor:
        await _copy_incoming(cursor, _RESULTS, [_result_row(r) for r in results])
        await cursor.execute(_RESULTS.insert_new)
        # A result naming no command Kairos issued is unmatched until that command shows up.
        await cursor.execute(
            "UPDATE scan_results r SET matched = false WHERE r.event_id = ANY(%s) AND NOT EXISTS"
            " (SELECT 1 FROM scan_commands c WHERE c.command_id = r.command_id)",
            ([r.event_id for r in results],),
        )
        # The first of a batch's results for a command decides its outcome, as it would have
        # alone: a later one finds the outcome set.
        await cursor.execute(
            f"UPDATE scan_commands c SET outcome = {_OUTCOME}, outcome_at = r.completed_at"
            " FROM (SELECT DISTINCT ON (command_id) command_id, status, completed_at"
            f" FROM {_RESULTS.name} ORDER BY command_id, position) r"
            " WHERE c.command_id = r.command_id AND c.outcome IS NULL"
        )
    summary.applied += len(results)


async def _apply_commands(
    conn: psycopg.AsyncConnection, commands: list[ScanCommand], summary: BatchSummary
) -> None:
    if not commands:
        return
    async with conn.cursor() as cursor:
        await _copy_incoming(cursor, _COMMANDS, [_command_row(c) for c in commands])
        await cursor.execute(_COMMANDS.insert_new)
        # Results and commands travel on different topics: a result may be projected first.
        await cursor.execute(
            f"UPDATE scan_commands c SET outcome = {_OUTCOME}, outcome_at = r.completed_at"
            " FROM scan_results r WHERE r.command_id = c.command_id"
            " AND c.command_id = ANY(%s) AND c.outcome IS NULL",
            ([c.command_id for c in commands],),
        )
        await cursor.execute(
            "UPDATE scan_results SET matched = true WHERE NOT matched AND command_id = ANY(%s)",
            ([c.command_id for c in commands],),
        )
    summary.applied += len(commands)


async def _apply_timeouts(
    conn: psycopg.AsyncConnection, timeouts: list[CommandTimedOut], summary: BatchSummary
) -> None:
    if not timeouts:
        return
    async with conn.cursor() as cursor:
        await cursor.executemany(
            "UPDATE scan_commands SET outcome = 'timed_out', outcome_at = %s"
            " WHERE command_id = %s AND outcome IS NULL",
            [(t.deadline, t.command_id) for t in timeouts],
        )
    summary.applied += len(timeouts)


async def _apply_dead_letters(
    conn: psycopg.AsyncConnection, letters: list[DeadLetter], summary: BatchSummary
) -> None:
    if not letters:
        return
    async with conn.cursor() as cursor:
        await cursor.executemany(
            'INSERT INTO dead_letters (event_id, source_topic, partition, "offset", key, error,'
            " raw, received_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (event_id) DO NOTHING",
            [_dead_letter_row(d) for d in letters],
        )
    summary.applied += len(letters)


async def _apply_config(
    conn: psycopg.AsyncConnection, published: ConfigPublished, summary: BatchSummary
) -> None:
    config = published.config
    await conn.execute(
        "INSERT INTO scheduler_config (id, config, version, updated_at)"
        " VALUES (true, %s, %s, now())"
        " ON CONFLICT (id) DO UPDATE SET config = excluded.config, version = excluded.version,"
        " updated_at = excluded.updated_at WHERE excluded.version > scheduler_config.version",
        (Jsonb(config.model_dump(mode="json")), config.version),
    )
    summary.applied += 1


_SCHEDULE_COLUMNS = (
    "schedule_id", "name", "definition", "status", "enabled", "paused", "pause_note",
    "disabled_reason", "is_system", "next_fire_at", "last_fired_at", "last_success_at", "runs",
    "skipped_runs", "failed_runs", "consecutive_failures", "last_error", "version", "deleted",
    "created_at", "updated_at", "incarnation", "succeeded_runs", "partially_failed_runs",
    "dropped_occurrences",
)  # fmt: skip

# A deleted schedule may be created again under the same id: its new state starts over at
# version 1 but was created after the deletion.
_UPSERT_SCHEDULE = (
    f"INSERT INTO schedules ({', '.join(_SCHEDULE_COLUMNS)}) "
    f"VALUES ({', '.join(['%s'] * len(_SCHEDULE_COLUMNS))}) "
    "ON CONFLICT (schedule_id) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in _SCHEDULE_COLUMNS[1:])
    + " WHERE excluded.version > schedules.version"
    " OR (schedules.deleted AND excluded.created_at > schedules.updated_at)"
)


async def _apply_schedules(
    conn: psycopg.AsyncConnection, changes: list[ScheduleStateChanged], summary: BatchSummary
) -> None:
    async with conn.cursor() as cursor:
        for change in changes:
            state = change.state
            if state is None:
                await cursor.execute(
                    "UPDATE schedules SET deleted = true, version = %s, updated_at = %s,"
                    " next_fire_at = NULL WHERE schedule_id = %s AND version < %s",
                    (change.version, change.changed_at, change.schedule_id, change.version),
                )
            else:
                schedule = state.schedule
                row = (
                    schedule.id, schedule.name, Jsonb(schedule.model_dump(mode="json")),
                    schedule_status(state).value, state.enabled, state.paused, state.pause_note,
                    state.disabled_reason, schedule.is_system, state.next_fire_at,
                    state.last_fired_at, state.last_success_at, state.runs, state.skipped_runs,
                    state.failed_runs, state.consecutive_failures, state.last_error,
                    state.version, False, state.created_at, state.updated_at,
                    state.incarnation or "", state.succeeded_runs, state.partially_failed_runs,
                    Jsonb(state.dropped_occurrences),
                )  # fmt: skip
                await cursor.execute(_UPSERT_SCHEDULE, row)
            summary.applied += 1


async def _apply_schedule_runs(
    conn: psycopg.AsyncConnection, runs: list[ScheduleRunRecorded], summary: BatchSummary
) -> None:
    if not runs:
        return
    async with conn.cursor() as cursor:
        # Records of one run come in order (one key, one partition): fired/skipped, then how
        # it ended. A dropped occurrence never overwrites a run; a backfill's fired starts over.
        await cursor.executemany(
            "INSERT INTO schedule_runs (schedule_id, incarnation, occurrence, attempt, reason,"
            " fired_at, outcome, error, hosts_matched, commands_issued, commands_succeeded,"
            " commands_failed, skip_reason, skipped_hosts)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (schedule_id, incarnation, occurrence, attempt) DO UPDATE SET"
            " outcome = excluded.outcome,"
            " error = excluded.error,"
            " skip_reason = excluded.skip_reason,"
            " commands_succeeded = excluded.commands_succeeded,"
            " commands_failed = excluded.commands_failed,"
            " fired_at = CASE WHEN excluded.outcome IN ('fired', 'skipped')"
            " THEN excluded.fired_at ELSE schedule_runs.fired_at END,"
            " hosts_matched = CASE WHEN excluded.outcome IN ('fired', 'skipped')"
            " THEN excluded.hosts_matched ELSE schedule_runs.hosts_matched END,"
            " commands_issued = CASE WHEN excluded.outcome IN ('fired', 'skipped')"
            " THEN excluded.commands_issued ELSE schedule_runs.commands_issued END,"
            " skipped_hosts = CASE WHEN excluded.outcome IN ('fired', 'skipped')"
            " THEN excluded.skipped_hosts ELSE schedule_runs.skipped_hosts END"
            " WHERE excluded.outcome <> 'dropped'",
            [_schedule_run_row(r) for r in runs],
        )
    summary.applied += len(runs)


# The rows below list their columns in the order of their statement's column list, packed: a
# `# fmt: skip` holds only on a whole statement, not on a tuple inside a comprehension.


def _result_row(r: ScanCompleted) -> tuple[Any, ...]:
    return (
        r.event_id, r.command_id, r.host_id, r.scanner, r.status.value, r.started_at,
        r.completed_at, r.score, r.passed, r.failed, r.severity_critical_failed,
        r.severity_high_failed, r.severity_medium_failed, r.severity_low_failed, r.scan_id,
        r.error,
    )  # fmt: skip


def _command_row(c: ScanCommand) -> tuple[Any, ...]:
    return (
        c.command_id, c.host_id, c.scanner, c.priority, c.reason.value, c.state.value, c.due_at,
        c.issued_at, c.deadline, c.attempt, c.schedule_id,
    )  # fmt: skip


def _dead_letter_row(d: DeadLetter) -> tuple[Any, ...]:
    return (
        d.event_id, d.source_topic, d.partition, d.offset, d.key, d.error, d.raw, d.received_at,
    )  # fmt: skip


def _schedule_run_row(r: ScheduleRunRecorded) -> tuple[Any, ...]:
    return (
        r.schedule_id, r.incarnation or "", r.occurrence, r.attempt, r.reason, r.fired_at,
        r.outcome, r.error, r.hosts_matched, r.commands_issued, r.commands_succeeded,
        r.commands_failed, r.skip_reason, Jsonb(r.skipped_hosts),
    )  # fmt: skip
