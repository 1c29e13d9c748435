"""The /status range counts can be answered from an index alone, at any fleet size.

PostgreSQL uses a partial index only when the query's WHERE implies the index's predicate,
so a small edit to either side silently turns a range count into a full scan. With
sequential and bitmap scans switched off and the other partial index dropped (inside a
transaction that is rolled back), the planner shows whether the index serves the count.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from api.queries import DUE_SOON_COUNT, OVERDUE_COUNT
from kairos.floor.db import migrate
from kairos.floor.settings import Settings

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
NEXT_HOUR = {"now": NOW, "until": NOW + timedelta(hours=1)}


INDEXES = ("host_schedule_dispatchable", "host_schedule_scannable")


def plan_without(settings: Settings, dropped: str, statement: str, params: dict[str, Any]) -> str:
    with psycopg.connect(settings.database_url) as conn:
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        conn.execute(f"DROP INDEX {dropped}")
        rows = conn.execute(f"EXPLAIN {statement}", params).fetchall()
        conn.rollback()
    return "\n".join(row[0] for row in rows)


@pytest.mark.parametrize(
    ("statement", "params", "index"),
    [
        (OVERDUE_COUNT, {"now": NOW}, "host_schedule_dispatchable"),
        (DUE_SOON_COUNT, NEXT_HOUR, "host_schedule_scannable"),
    ],
    ids=["overdue", "due-next-hour"],
)
def test_status_range_counts_read_only_their_index(
    settings: Settings, statement: str, params: dict[str, Any], index: str
) -> None:
    asyncio.run(migrate(settings.database_url))
    (rival,) = [other for other in INDEXES if other != index]
    plan = plan_without(settings, rival, statement, params)
    assert f"Index Only Scan using {index}" in plan, plan
