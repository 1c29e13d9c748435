"""Alerts in the read model: raised and resolved in the projection's transaction, published
on the `alerts` topic afterwards (an outbox: a row whose published revision lags is sent
again until the broker acknowledges it).

Host and schedule alerts follow the changes the projector applies, so they are exactly as
durable as the read model; past-promise and cap alerts depend on time and are checked
periodically by one projector at a time (an advisory lock).
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from schemas.alerts import FLEET_SUBJECT, AlertChanged, AlertState, AlertType
from schemas.config import SchedulerConfig
from schemas.schedules import ScheduleStateChanged
from schemas.state import HostStateChanged
from streams.policy.alerts import (
    HOST_ALERTS,
    AlertDecision,
    CapWatch,
    HostStep,
    RaiseAlert,
    ResolveAlert,
    cap_saturation,
    host_alerts,
    promised_since,
    schedule_alert,
)

ALERT_NAMESPACE = uuid.UUID("6c1f3f9e-4a52-4d7e-9d0e-1f3b2a6c8e01")
CHECK_LOCK = 0x6B616972_616C7274  # "kairalrt": one projector runs the periodic check at a time.
MAX_PROMISE_ALERTS_PER_CHECK = 10_000
"""A fleet that fell behind all at once is alerted in steps, not in one huge transaction."""
CAP_WATCH = "cap_saturated"


@dataclass
class AlertCounts:
    raised: int = 0
    resolved: int = 0

    def add(self, decisions: Iterable[AlertDecision]) -> None:
        for decision in decisions:
            if isinstance(decision, RaiseAlert):
                self.raised += 1
            else:
                self.resolved += 1


def alert_id(kind: AlertType, subject_id: str, at: datetime) -> uuid.UUID:
    """Deterministic: replaying the change that raised an alert names the same alert."""
    return uuid.uuid5(ALERT_NAMESPACE, f"{kind.value}/{subject_id}/{at.isoformat()}")


async def read_config(conn: psycopg.AsyncConnection) -> SchedulerConfig:
    cursor = await conn.execute("SELECT config FROM scheduler_config")
    row = await cursor.fetchone()
    if row is None:
        return SchedulerConfig()
    known = SchedulerConfig.model_fields
    return SchedulerConfig(**{key: value for key, value in row[0].items() if key in known})


async def _open_alerts(
    conn: psycopg.AsyncConnection, kinds: Sequence[AlertType], subject_ids: Sequence[str]
) -> dict[str, dict[AlertType, dict[str, Any]]]:
    cursor = await conn.execute(
        "SELECT subject_id, alert_type, details FROM alerts WHERE resolved_at IS NULL"
        " AND alert_type = ANY(%s) AND subject_id = ANY(%s)",
        ([kind.value for kind in kinds], list(subject_ids)),
    )
    found: dict[str, dict[AlertType, dict[str, Any]]] = defaultdict(dict)
    for subject_id, kind, details in await cursor.fetchall():
        found[subject_id][AlertType(kind)] = details
    return found


async def apply_host_alerts(
    conn: psycopg.AsyncConnection,
    changes: Sequence[HostStateChanged],
    before: Mapping[str, tuple[int, float | None]],
    created_again: Set[str] = frozenset(),
) -> list[AlertDecision]:
    """Alerts of the host changes newer than the read model held (`before`: version, score).

    `created_again`: hosts whose changes are of an incarnation newer than the read model's
    row. The alerts still open for the earlier one are resolved as its deletion would have
    resolved them (the deletion came in the same batch, or never reached the read model),
    at the new incarnation's creation, before the new one's changes are looked at."""
    steps: dict[str, list[HostStateChanged]] = defaultdict(list)
    for change in changes:
        known = before.get(change.host_id)
        if known is None or change.version > known[0]:
            steps[change.host_id].append(change)
    if not steps:
        return []
    config = await read_config(conn)
    open_alerts = await _open_alerts(conn, HOST_ALERTS, sorted(steps))
    decisions: list[AlertDecision] = []
    for host_id in sorted(steps):
        ordered = sorted(steps[host_id], key=lambda change: change.version)
        host_steps = [HostStep(change.schedule, change.changed_at) for change in ordered]
        first = ordered[0].schedule
        if host_id in created_again and first is not None:
            host_steps.insert(0, HostStep(None, first.created_at))
        decisions += host_alerts(
            host_id,
            before[host_id][1] if host_id in before else None,
            host_steps,
            open_alerts.get(host_id, {}),
            score_drop=config.alert_score_drop,
            max_interval=timedelta(minutes=config.max_interval_minutes),
        )
    await write(conn, decisions)
    return decisions


async def apply_schedule_alerts(
    conn: psycopg.AsyncConnection, changes: Sequence[ScheduleStateChanged]
) -> list[AlertDecision]:
    latest: dict[str, ScheduleStateChanged] = {}
    for change in changes:
        current = latest.get(change.schedule_id)
        if current is None or change.version > current.version:
            latest[change.schedule_id] = change
    if not latest:
        return []
    open_alerts = await _open_alerts(conn, (AlertType.SCHEDULE_DISABLED,), sorted(latest))
    decisions = [
        decision
        for schedule_id, change in sorted(latest.items())
        if (
            decision := schedule_alert(
                schedule_id, change.state, schedule_id in open_alerts, change.changed_at
            )
        )
        is not None
    ]
    await write(conn, decisions)
    return decisions


async def write(conn: psycopg.AsyncConnection, decisions: Sequence[AlertDecision]) -> None:
    """Apply `decisions`, each subject's in their order: an alert raised and resolved in one
    batch ends resolved.

    Subjects do not touch each other's rows, so the n-th decision of every subject goes in one
    step: a batch takes as many statements as one subject has decisions, not one per change
    from raising to resolving (thousands of one-row statements when hosts alternate)."""
    steps: list[list[AlertDecision]] = []
    taken: Counter[str] = Counter()
    for decision in decisions:
        step = taken[decision.subject_id]
        taken[decision.subject_id] += 1
        if step == len(steps):
            steps.append([])
        steps[step].append(decision)
    async with conn.cursor() as cursor:
        for step_decisions in steps:
            resolves = [_resolve_row(d) for d in step_decisions if isinstance(d, ResolveAlert)]
            raises = [_raise_row(d) for d in step_decisions if isinstance(d, RaiseAlert)]
            if resolves:
                await cursor.executemany(_RESOLVE, resolves)
            if raises:
                await cursor.executemany(_RAISE, raises)


# Only alerts raised before the resolving change: a replayed old change never resolves an
# alert raised after it.
_RESOLVE = (
    "UPDATE alerts SET resolved_at = %s, resolution = %s, revision = 2"
    " WHERE alert_type = %s AND subject_id = %s AND resolved_at IS NULL AND raised_at <= %s"
)
# A replayed raise meets its own row (same id) or the open one: nothing new.
_RAISE = (
    "INSERT INTO alerts (alert_id, alert_type, subject_type, subject_id, severity, summary,"
    " details, raised_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)


def _resolve_row(decision: ResolveAlert) -> tuple[Any, ...]:
    return (
        decision.at, decision.resolution, decision.alert_type.value, decision.subject_id,
        decision.at,
    )  # fmt: skip


def _raise_row(decision: RaiseAlert) -> tuple[Any, ...]:
    return (
        alert_id(decision.alert_type, decision.subject_id, decision.at),
        decision.alert_type.value, decision.subject_type, decision.subject_id,
        decision.severity, decision.summary, Jsonb(dict(decision.details)), decision.at,
    )  # fmt: skip


TimeCheck = Callable[
    [psycopg.AsyncConnection, SchedulerConfig, datetime], Awaitable[list[AlertDecision]]
]
"""A further time-based check, run under the same lock and in the same transaction."""


async def check_time_conditions(
    conn: psycopg.AsyncConnection, now: datetime, *, more: Sequence[TimeCheck] = ()
) -> AlertCounts:
    """Past-promise and cap-saturation alerts as of `now`, then the checks in `more`;
    skipped while another projector holds the check. Runs in its own transaction."""
    counts = AlertCounts()
    async with conn.transaction():
        cursor = await conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (CHECK_LOCK,))
        row = await cursor.fetchone()
        if row is None or not row[0]:
            return counts
        config = await read_config(conn)
        since = promised_since(now, timedelta(minutes=config.max_interval_minutes))
        counts.raised += await _raise_past_promise(conn, since, now)
        counts.resolved += await _resolve_past_promise(conn, since, now)
        decision = await _watch_cap(conn, config, now)
        if decision is not None:
            counts.add([decision])
            await write(conn, [decision])
        for check in more:
            counts.add(await check(conn, config, now))
    return counts


_PROMISE_APPLIES = "h.is_active AND NOT h.maintenance_mode AND NOT h.deleted"


async def _raise_past_promise(conn: psycopg.AsyncConnection, since: datetime, now: datetime) -> int:
    cursor = await conn.execute(
        "INSERT INTO alerts (alert_id, alert_type, subject_type, subject_id, severity, summary,"
        " details, raised_at)"
        " SELECT md5('past_promise/' || h.host_id || '/' || %(now)s::text)::uuid,"
        " 'past_promise', 'host', h.host_id, 'critical',"
        " h.host_id || ' has had no successful scan since ' ||"
        " to_char(COALESCE(h.last_scan_completed, h.created_at) AT TIME ZONE 'UTC',"
        " 'YYYY-MM-DD HH24:MI') || ' UTC, past the promise',"
        " jsonb_build_object('last_scan_completed', h.last_scan_completed,"
        " 'created_at', h.created_at, 'promised_since', %(since)s::timestamptz), %(now)s"
        f" FROM host_schedule h WHERE {_PROMISE_APPLIES}"
        " AND COALESCE(h.last_scan_completed, h.created_at) < %(since)s"
        " AND NOT EXISTS (SELECT 1 FROM alerts a WHERE a.alert_type = 'past_promise'"
        " AND a.subject_id = h.host_id AND a.resolved_at IS NULL)"
        " ORDER BY COALESCE(h.last_scan_completed, h.created_at)"
        f" LIMIT {MAX_PROMISE_ALERTS_PER_CHECK} ON CONFLICT DO NOTHING",
        {"since": since, "now": now},
    )
    return cursor.rowcount


async def _resolve_past_promise(
    conn: psycopg.AsyncConnection, since: datetime, now: datetime
) -> int:
    cursor = await conn.execute(
        "UPDATE alerts a SET resolved_at = %(now)s, revision = 2, resolution = CASE"
        " WHEN h.deleted THEN 'host deleted' WHEN NOT h.is_active THEN 'host inactive'"
        " WHEN h.maintenance_mode THEN 'host in maintenance'"
        " ELSE 'scanned within the promise' END"
        " FROM host_schedule h WHERE a.alert_type = 'past_promise' AND a.resolved_at IS NULL"
        f" AND h.host_id = a.subject_id AND NOT ({_PROMISE_APPLIES}"
        " AND COALESCE(h.last_scan_completed, h.created_at) < %(since)s)",
        {"since": since, "now": now},
    )
    return cursor.rowcount


async def _watch_cap(
    conn: psycopg.AsyncConnection, config: SchedulerConfig, now: datetime
) -> AlertDecision | None:
    # Commands issued and still unanswered before their deadline hold the cap's slots.
    cursor = await conn.execute(
        "SELECT count(*) FROM scan_commands WHERE issued_at > %s AND outcome IS NULL"
        " AND deadline > %s",
        (now - timedelta(seconds=config.scan_timeout_seconds), now),
    )
    row = await cursor.fetchone()
    in_flight = int(row[0]) if row else 0
    cursor = await conn.execute("SELECT since FROM alert_watches WHERE name = %s", (CAP_WATCH,))
    stored = await cursor.fetchone()
    open_alerts = await _open_alerts(conn, (AlertType.CAP_SATURATED,), (FLEET_SUBJECT,))
    watch, decision = cap_saturation(
        CapWatch(stored[0] if stored else None),
        in_flight=in_flight,
        cap=config.max_concurrent_scans,
        now=now,
        threshold=timedelta(minutes=config.alert_cap_saturated_minutes),
        is_open=FLEET_SUBJECT in open_alerts,
        subject_id=FLEET_SUBJECT,
    )
    await conn.execute(
        "INSERT INTO alert_watches (name, since) VALUES (%s, %s)"
        " ON CONFLICT (name) DO UPDATE SET since = excluded.since",
        (CAP_WATCH, watch.saturated_since),
    )
    return decision


_ALERT_COLUMNS = (
    "alert_id, revision, alert_type, subject_type, subject_id, severity, summary, details,"
    " raised_at, resolved_at, resolution"
)


async def unpublished(conn: psycopg.AsyncConnection, limit: int) -> list[AlertChanged]:
    """Alerts whose latest revision has not been acknowledged on the topic, oldest first."""
    async with conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(
            f"SELECT {_ALERT_COLUMNS} FROM alerts WHERE published_revision < revision"
            " ORDER BY raised_at, alert_id LIMIT %s",
            (limit,),
        )
        rows = await cursor.fetchall()
    await conn.commit()
    return [message(row) for row in rows]


def message(row: Mapping[str, Any]) -> AlertChanged:
    resolved = row["resolved_at"] is not None
    return AlertChanged(
        event_id=uuid.uuid5(row["alert_id"], str(row["revision"])),
        alert_id=row["alert_id"],
        revision=row["revision"],
        alert_type=row["alert_type"],
        subject_type=row["subject_type"],
        subject_id=row["subject_id"],
        state=AlertState.RESOLVED if resolved else AlertState.FIRING,
        severity=row["severity"],
        summary=row["summary"],
        details=row["details"],
        raised_at=row["raised_at"],
        resolved_at=row["resolved_at"],
        resolution=row["resolution"],
    )


async def mark_published(conn: psycopg.AsyncConnection, sent: Sequence[AlertChanged]) -> None:
    # One statement over arrays: an UPDATE per alert, even pipelined, pays PostgreSQL's
    # per-statement work for every alert of the round.
    async with conn.transaction():
        await conn.execute(
            "UPDATE alerts a SET published_revision = s.revision"
            " FROM unnest(%s::uuid[], %s::int4[]) AS s(alert_id, revision)"
            " WHERE a.alert_id = s.alert_id AND a.published_revision < s.revision",
            ([alert.alert_id for alert in sent], [alert.revision for alert in sent]),
        )
