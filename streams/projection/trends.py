"""Trend alerts in the read model: a host whose score fell on each of its last scans (checked
when its results are projected, in the batch's transaction) and an organization whose average
score fell over a day (checked with the time-based alerts).

The scores are those that set a host's score: succeeded results of the adaptive scanner for a
command Kairos issued (`scan_results.matched`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta

import psycopg

from schemas.alerts import AlertType
from schemas.commands import ADAPTIVE_SCANNER
from schemas.config import SchedulerConfig
from streams.policy.alerts import AlertDecision, organization_trend, score_trend
from streams.projection.alerts import _open_alerts, read_config, write

TREND_WINDOW = timedelta(hours=24)


def _scored(alias: str) -> str:
    """The results that set a host's score, in table `alias`."""
    return (
        f"{alias}.score IS NOT NULL AND {alias}.scanner = '{ADAPTIVE_SCANNER}'"
        f" AND {alias}.status = 'succeeded' AND {alias}.matched"
    )


_LATEST_SCORES = (
    "SELECT host_id, score, completed_at FROM ("
    " SELECT host_id, score, completed_at, row_number() OVER ("
    "  PARTITION BY host_id ORDER BY completed_at DESC, event_id DESC) AS n"
    f" FROM scan_results r WHERE host_id = ANY(%s) AND {_scored('r')}"
    ") latest WHERE n <= %s ORDER BY host_id, completed_at, n DESC"
)


async def apply_score_trends(
    conn: psycopg.AsyncConnection, host_ids: Sequence[str]
) -> list[AlertDecision]:
    """Raise or resolve `score_falling` for hosts that got results in this batch."""
    if not host_ids:
        return []
    config = await read_config(conn)
    cursor = await conn.execute(
        _LATEST_SCORES, (sorted(set(host_ids)), config.alert_trend_scans + 1)
    )
    scores: dict[str, list[float]] = defaultdict(list)
    latest_at: dict[str, datetime] = {}
    for host_id, score, completed_at in await cursor.fetchall():
        scores[host_id].append(float(score))
        latest_at[host_id] = completed_at
    open_alerts = await _open_alerts(conn, (AlertType.SCORE_FALLING,), sorted(scores))
    decisions = [
        decision
        for host_id in sorted(scores)
        if (
            decision := score_trend(
                host_id,
                scores[host_id],
                host_id in open_alerts,
                scans=config.alert_trend_scans,
                at=latest_at[host_id],
            )
        )
        is not None
    ]
    await write(conn, decisions)
    return decisions


# Each host's latest score at two instants: now, and a day ago. Only hosts scored at both
# count, so a host added today neither lifts nor drags the comparison.
_ORG_AVERAGES = (
    "WITH hosts AS ("
    " SELECT host_id, organization FROM host_schedule"
    " WHERE organization IS NOT NULL AND is_active AND NOT deleted),"
    " now_scores AS (SELECT DISTINCT ON (r.host_id) r.host_id, r.score FROM scan_results r"
    f"  JOIN hosts USING (host_id) WHERE {_scored('r')}"
    "  AND r.completed_at <= %(now)s ORDER BY r.host_id, r.completed_at DESC),"
    " then_scores AS (SELECT DISTINCT ON (r.host_id) r.host_id, r.score FROM scan_results r"
    f"  JOIN hosts USING (host_id) WHERE {_scored('r')}"
    "  AND r.completed_at <= %(then)s ORDER BY r.host_id, r.completed_at DESC)"
    " SELECT h.organization, avg(n.score), avg(t.score) FROM hosts h"
    " JOIN now_scores n USING (host_id) JOIN then_scores t USING (host_id)"
    " GROUP BY h.organization"
)


async def check_organization_trends(
    conn: psycopg.AsyncConnection, config: SchedulerConfig, now: datetime
) -> list[AlertDecision]:
    """Raise or resolve `org_score_falling` as of `now`, in the caller's transaction."""
    cursor = await conn.execute(_ORG_AVERAGES, {"now": now, "then": now - TREND_WINDOW})
    averages = {
        organization: (float(now_average), float(then_average))
        for organization, now_average, then_average in await cursor.fetchall()
    }
    cursor = await conn.execute(
        "SELECT subject_id, details FROM alerts WHERE resolved_at IS NULL AND alert_type = %s",
        (AlertType.ORG_SCORE_FALLING.value,),
    )
    open_alerts = {subject: details for subject, details in await cursor.fetchall()}
    decisions: list[AlertDecision] = []
    for organization in sorted(set(averages) | set(open_alerts)):
        average_now, average_then = averages.get(organization, (None, None))
        decision = organization_trend(
            organization,
            average_now,
            average_then,
            open_alerts.get(organization),
            points=config.alert_org_trend_points,
            now=now,
        )
        if decision is not None:
            decisions.append(decision)
    await write(conn, decisions)
    return decisions
