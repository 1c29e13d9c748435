"""Which schedule run (occurrence) each schedule command was issued for.

A schedule command does not carry its occurrence, but its id is derived from (schedule,
occurrence, host, attempt) (`streams.policy.targets.occurrence_command_id`), so the projector
can tell which occurrence it belongs to by deriving the id again. For a command it tries the
command's due time (the occurrence's fire time: the occurrence itself unless jitter or a
blackout moved it) and the newest runs of its schedule projected so far; a run recorded after
its commands were projected tries the commands of its schedule still without one. A
backfilled run's commands carry the backfill request in their id and stay without a run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

import psycopg

from schemas.commands import ScanCommand
from schemas.schedules import ScheduleRunRecorded
from streams.policy.targets import occurrence_command_id

RECENT_RUNS = 64
"""Runs of a (schedule, attempt) a new command is matched against, newest first."""
UNLINKED_PER_RUN = 10_000
"""Commands without a run a newly fired run is matched against, newest first."""


def _match(
    command_id: str, schedule_id: str, host_id: str, attempt: int, candidates: Iterable[datetime]
) -> datetime | None:
    for occurrence in candidates:
        if occurrence_command_id(schedule_id, occurrence, host_id, attempt) == command_id:
            return occurrence
    return None


async def link_occurrences(
    conn: psycopg.AsyncConnection,
    commands: Sequence[ScanCommand],
    runs: Sequence[ScheduleRunRecorded],
) -> int:
    """Set `scan_commands.occurrence` for the schedule commands of a batch and for earlier
    commands of the runs it fired; returns how many commands were linked. Idempotent."""
    links: dict[str, datetime] = {}
    scheduled = [c for c in commands if c.schedule_id is not None]
    async with conn.cursor() as cursor:
        if scheduled:
            pairs = sorted({(str(c.schedule_id), c.attempt) for c in scheduled})
            await cursor.execute(
                "SELECT p.schedule_id, p.attempt, r.occurrence"
                " FROM unnest(%s::text[], %s::int4[]) AS p(schedule_id, attempt)"
                " CROSS JOIN LATERAL (SELECT occurrence FROM schedule_runs s"
                " WHERE s.schedule_id = p.schedule_id AND s.attempt = p.attempt"
                " ORDER BY s.fired_at DESC LIMIT %s) r",
                ([p[0] for p in pairs], [p[1] for p in pairs], RECENT_RUNS),
            )
            recorded: dict[tuple[str, int], list[datetime]] = defaultdict(list)
            for schedule_id, attempt, occurrence in await cursor.fetchall():
                recorded[(schedule_id, attempt)].append(occurrence)
            for c in scheduled:
                assert c.schedule_id is not None
                found = _match(
                    c.command_id,
                    c.schedule_id,
                    c.host_id,
                    c.attempt,
                    (c.due_at, *recorded[(c.schedule_id, c.attempt)]),
                )
                if found is not None:
                    links[c.command_id] = found
        fired: dict[tuple[str, int], set[datetime]] = defaultdict(set)
        for run in runs:
            if run.outcome == "fired":
                fired[(run.schedule_id, run.attempt)].add(run.occurrence)
        for (schedule_id, attempt), occurrences in sorted(fired.items()):
            await cursor.execute(
                "SELECT command_id, host_id FROM scan_commands WHERE schedule_id = %s"
                " AND attempt = %s AND occurrence IS NULL ORDER BY issued_at DESC LIMIT %s",
                (schedule_id, attempt, UNLINKED_PER_RUN),
            )
            for command_id, host_id in await cursor.fetchall():
                if command_id not in links:
                    found = _match(command_id, schedule_id, host_id, attempt, occurrences)
                    if found is not None:
                        links[command_id] = found
        if links:
            await cursor.executemany(
                "UPDATE scan_commands SET occurrence = %s"
                " WHERE command_id = %s AND occurrence IS NULL",
                [(occurrence, command_id) for command_id, occurrence in sorted(links.items())],
            )
    return len(links)
