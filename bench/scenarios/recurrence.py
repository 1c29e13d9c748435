"""10. Recurrence micro-benchmark: `next_occurrences` and validation on the worst shapes.

Pure calendar arithmetic, no broker, no database: `python -m bench recurrence` times
`kairos.recurrence.next_occurrences(schedule, after, count=5)` for the blackout shapes that
used to stall the worker (issue 14's table), plus `schedule_problem` on slow RRULEs, from
several starting instants (before, inside and at the edge of a blackout), and prints
min / median / max milliseconds per call (after one warm-up call) and how many occurrences
each call found. The target is every call under 10 ms. The machine's load shows in the
figures: run it on a quiet machine.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kairos.recurrence import next_occurrences, schedule_problem
from schemas.schedules import Schedule

KEY, NUMBER, TITLE = "recurrence", 10, "Recurrence micro-benchmark"
TARGET_MS = 10.0
DAY = 86_400
# Saturday 2026-03-28 00:00 UTC is a weekend start; the instants cover before/in/after it.
STARTS = [
    datetime(2026, 3, 27, 23, 58, tzinfo=UTC),
    datetime(2026, 3, 28, 0, 0, tzinfo=UTC),
    datetime(2026, 3, 28, 13, 7, 30, tzinfo=UTC),
    datetime(2026, 3, 29, 23, 59, 59, tzinfo=UTC),
    datetime(2026, 10, 24, 22, 0, tzinfo=UTC),
]


def _schedule(
    recurrence: dict[str, Any], *windows: tuple[dict[str, str], int], **extra: Any
) -> Schedule:
    return Schedule.model_validate(
        {
            "id": "bench-recurrence",
            "name": "bench-recurrence",
            "scanner": "nmap",
            "recurrence": recurrence,
            "exclusions": [
                {"recurrence": window, "duration_seconds": seconds} for window, seconds in windows
            ],
            **extra,
        }
    )


def _cron(expression: str) -> dict[str, str]:
    return {"kind": "cron", "expression": expression}


def _rrule(rule: str) -> dict[str, str]:
    return {"kind": "rrule", "rule": rule}


EVERY_MINUTE = _cron("* * * * *")
WEEKEND = (_cron("0 0 * * 6"), 2 * DAY)
SHAPES: list[tuple[str, Schedule]] = [
    ("* * * * * | MINUTELY;BYSECOND=0 x 1 day",
     _schedule(EVERY_MINUTE, (_rrule("FREQ=MINUTELY;BYSECOND=0"), DAY))),
    ("* * * * * | MINUTELY;INTERVAL=30 x 1 day",
     _schedule(EVERY_MINUTE, (_rrule("FREQ=MINUTELY;INTERVAL=30"), DAY))),
    ("every 5 s | weekend x 2 days",
     _schedule({"kind": "interval", "seconds": 5}, WEEKEND)),
    ("* * * * * | weekend x 2 days", _schedule(EVERY_MINUTE, WEEKEND)),
    ("* * * * * | weekend x 2 days, skip",
     _schedule(EVERY_MINUTE, WEEKEND, exclusion_action="skip")),
    ("*/20 * * * * | */20 x 5 min, skip (never free)",
     _schedule(_cron("*/20 * * * *"), (_cron("*/20 * * * *"), 300), exclusion_action="skip")),
    ("* * * * * * | 3 overlapping daily windows, Amsterdam",
     _schedule(_cron("* * * * * *"), *[(_cron(f"0 {h} * * *"), 3 * 3600) for h in (0, 2, 4)],
               timezone="Europe/Amsterdam", jitter_seconds=30)),
    ("0 * * * * | DAILY 0,6,12h x 7 h, New York",
     _schedule(_cron("0 * * * *"), (_rrule("FREQ=DAILY;BYHOUR=0,6,12;BYMINUTE=0"), 7 * 3600),
               timezone="America/New_York")),
]  # fmt: skip
VALIDATIONS: list[tuple[str, Schedule]] = [
    ("validate MINUTELY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO",
     _schedule(_rrule("FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO"))),
    ("validate MINUTELY;BYYEARDAY=366;BYHOUR=3",
     _schedule(_rrule("FREQ=MINUTELY;BYYEARDAY=366;BYHOUR=3"))),
    ("validate HOURLY;INTERVAL=2;BYHOUR=0 from 01:00",
     _schedule(_rrule("FREQ=HOURLY;INTERVAL=2;BYHOUR=0"),
               start_at="2026-01-01T01:00:00Z")),
    ("validate cron 0 0 H 2 *", _schedule(_cron("0 0 H 2 *"))),
]  # fmt: skip


def _time(call: Callable[[], object], repeat: int) -> tuple[list[float], object]:
    """`repeat` timed calls after one untimed call (parsing caches, zoneinfo loading)."""
    call()
    timings, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = call()
        timings.append((time.perf_counter() - started) * 1000)
    return timings, result


def main(argv: list[str] | None = None) -> int:
    """Print one line per shape; exit 1 when any call took TARGET_MS or longer."""
    del argv  # No options.
    repeat = 3
    rows: list[tuple[str, list[float], str]] = []
    for label, schedule in SHAPES:
        timings: list[float] = []
        found = []
        for start in STARTS:
            spent, result = _time(
                lambda s=schedule, a=start: next_occurrences(s, a, count=5), repeat
            )
            timings += spent
            found.append(len(result))  # type: ignore[arg-type]
        rows.append((label, timings, "found " + "/".join(map(str, found))))
    for label, schedule in VALIDATIONS:
        spent, result = _time(lambda s=schedule: schedule_problem(s), repeat)
        rows.append((label, spent, "refused" if result else "accepted"))
    width = max(len(label) for label, _, _ in rows)
    print(f"{'shape':<{width}}  {'min ms':>8} {'median':>8} {'max ms':>8}  result")
    worst = 0.0
    for label, timings, note in rows:
        worst = max(worst, max(timings))
        print(f"{label:<{width}}  {min(timings):8.2f} {statistics.median(timings):8.2f} "
              f"{max(timings):8.2f}  {note}")  # fmt: skip
    verdict = "met" if worst < TARGET_MS else "NOT met"
    print(f"\nworst call {worst:.2f} ms; target < {TARGET_MS:.0f} ms per call: {verdict}")
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
