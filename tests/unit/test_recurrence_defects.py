"""Issue 14: calendar arithmetic checked against what cron, cronsim and the worker need.

One block per defect, written-out instants; each test failed on the croniter-based code.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kairos.floor.recurrence as recurrence
from kairos.floor.recurrence import (
    candidates,
    cron_problem,
    next_occurrences,
    occurrences_between,
    schedule_problem,
)
from schemas.schedules import ExclusionAction, Schedule, ScheduleStatus
from streams.policy.schedules import schedule_status
from tests.unit.schedule_factories import (
    created_state,
    cron,
    every,
    rrule_,
    schedule,
    tick,
)

AMS = "Europe/Amsterdam"
DAY = 86_400


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def ats(sched: Schedule, after: datetime, count: int = 3) -> list[datetime]:
    return [o.at for o in next_occurrences(sched, after, count=count)]


# --- 1. answers that do not depend on a croniter version ----------------------------------


def test_day_list_reaching_past_february_does_not_skip_the_first_of_march() -> None:
    found = ats(schedule(cron("0 0 1,15,30 * *")), utc(2026, 2, 15), count=3)
    assert found == [utc(2026, 3, 1), utc(2026, 3, 15), utc(2026, 3, 30)]
    assert ats(schedule(cron("0 0 */10 * *")), utc(2026, 2, 21), count=2) == [
        utc(2026, 3, 1),
        utc(2026, 3, 11),
    ]
    assert ats(schedule(cron("0 0 1,31 * *")), utc(2026, 1, 31), count=2) == [
        utc(2026, 2, 1),
        utc(2026, 3, 1),
    ]


def test_step_starting_past_its_range_fires_only_at_its_start() -> None:
    found = ats(schedule(cron("59/30 3-9/3 * * *")), utc(2026, 1, 1), count=4)
    assert found == [utc(2026, 1, 1, 3, 59), utc(2026, 1, 1, 6, 59), utc(2026, 1, 1, 9, 59),
                     utc(2026, 1, 2, 3, 59)]  # fmt: skip


def test_thirty_first_of_february_or_monday_is_valid_and_fires_on_february_mondays() -> None:
    sched = schedule(cron("0 0 31 2 1"))
    assert schedule_problem(sched) is None
    assert ats(sched, utc(2026, 1, 1), count=3) == [
        utc(2026, 2, 2),
        utc(2026, 2, 9),
        utc(2026, 2, 16),
    ]


# --- 2. a one-value range is that value ------------------------------------------------


def test_one_value_range_is_the_single_value() -> None:
    assert ats(schedule(cron("0 23-23 * * *")), utc(2026, 1, 1), count=2) == [
        utc(2026, 1, 1, 23),
        utc(2026, 1, 2, 23),
    ]
    # 2026-01-07 is a Wednesday.
    assert ats(schedule(cron("0 0 * * 3-3")), utc(2026, 1, 1), count=2) == [
        utc(2026, 1, 7),
        utc(2026, 1, 14),
    ]
    assert ats(schedule(cron("10-10/15 * * * *")), utc(2026, 1, 1), count=2) == [
        utc(2026, 1, 1, 0, 10),
        utc(2026, 1, 1, 1, 10),
    ]


# --- 3. day-of-month and day-of-week: Vixie's rule -------------------------------------


def test_day_fields_are_anded_when_either_starts_with_a_star() -> None:
    # Odd days that are Fridays: 2026-01-09 and 2026-01-23 (Jan 2 and 16 are even).
    found = ats(schedule(cron("0 0 */2 * 5")), utc(2026, 1, 1), count=3)
    assert found == [utc(2026, 1, 9), utc(2026, 1, 23), utc(2026, 2, 13)]
    # `*` in day-of-month: Fridays only.
    assert ats(schedule(cron("0 0 * * 5")), utc(2026, 1, 1), count=2) == [
        utc(2026, 1, 2),
        utc(2026, 1, 9),
    ]


def test_day_fields_are_ored_when_both_are_restricted() -> None:
    # The 1st of the month or any Friday; 2026-01-01 is a Thursday.
    found = ats(schedule(cron("0 0 1 * 5")), utc(2025, 12, 31), count=4)
    assert found == [utc(2026, 1, 1), utc(2026, 1, 2), utc(2026, 1, 9), utc(2026, 1, 16)]


# --- 4. DST: real time when the minute or the hour field starts with `*` -------------------


def test_fixed_hour_with_starred_minute_follows_real_time_on_spring_forward() -> None:
    # 02:00-03:00 does not exist in Amsterdam on 2026-03-29: nothing runs that night.
    sched = schedule(cron("*/10 2 * * *"), timezone=AMS)
    assert ats(sched, utc(2026, 3, 28, 23), count=2) == [
        utc(2026, 3, 30, 0),  # 02:00 CEST on the 30th
        utc(2026, 3, 30, 0, 10),
    ]


def test_fixed_hour_with_starred_minute_runs_both_passes_on_fall_back() -> None:
    # 02:00-03:00 happens twice in Amsterdam on 2026-10-25: 00:00-01:00 and 01:00-02:00 UTC.
    sched = schedule(cron("*/10 2 * * *"), timezone=AMS)
    found = [o.at for o in occurrences_between(sched, utc(2026, 10, 24, 12), utc(2026, 10, 25, 12))]
    assert found == [utc(2026, 10, 25, 0, m) for m in range(0, 60, 10)] + [
        utc(2026, 10, 25, 1, m) for m in range(0, 60, 10)
    ]


def test_fixed_time_still_follows_the_dst_policy() -> None:
    sched = schedule(cron("30 2 * * *"), timezone=AMS)
    assert ats(sched, utc(2026, 3, 28, 23), count=1) == [utc(2026, 3, 29, 1)]  # 03:00 CEST


# --- 5. validation evaluates as the worker does ----------------------------------------


def test_rrule_is_validated_from_the_schedules_own_start() -> None:
    start = "2026-01-01T01:00:00Z"
    never = schedule(rrule_("FREQ=HOURLY;INTERVAL=2;BYHOUR=0"), start_at=start)
    assert "FREQ=HOURLY;INTERVAL=2;BYHOUR=0" in (schedule_problem(never) or "")
    fine = schedule(rrule_("FREQ=HOURLY;INTERVAL=2;BYHOUR=1"), start_at=start)
    assert schedule_problem(fine) is None
    assert ats(fine, utc(2025, 12, 31), count=2) == [utc(2026, 1, 1, 1), utc(2026, 1, 2, 1)]


def test_rrule_start_is_read_in_the_schedules_timezone() -> None:
    # 01:00 UTC is 02:00 in Amsterdam in winter: even hours from there never reach 01:00.
    start = "2026-01-01T01:00:00Z"
    sched = schedule(rrule_("FREQ=HOURLY;INTERVAL=2;BYHOUR=1"), start_at=start, timezone=AMS)
    assert schedule_problem(sched) is not None
    sched = schedule(rrule_("FREQ=HOURLY;INTERVAL=2;BYHOUR=2"), start_at=start, timezone=AMS)
    assert schedule_problem(sched) is None


def test_rule_that_fires_less_than_once_in_thirty_years_is_refused() -> None:
    assert "30 years" in (schedule_problem(schedule(rrule_("FREQ=YEARLY;INTERVAL=720"))) or "")
    assert schedule_problem(schedule(rrule_("FREQ=YEARLY;INTERVAL=4"))) is None


RRULE_PARTS = {
    "FREQ": st.sampled_from(["YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY"]),
    "INTERVAL": st.sampled_from(["1", "2", "3", "7", "24", "25", "60", "90", "720"]),
    "BYMONTH": st.sampled_from(["1", "2", "2,8", "12"]),
    "BYMONTHDAY": st.sampled_from(["1", "29", "30", "31", "-1", "15,31"]),
    "BYYEARDAY": st.sampled_from(["1", "60", "366", "-1"]),
    "BYWEEKNO": st.sampled_from(["1", "53", "-1"]),
    "BYDAY": st.sampled_from(["MO", "SU,SA", "1MO", "-1FR", "MO,TU,WE,TH,FR"]),
    "BYHOUR": st.sampled_from(["0", "1", "2", "3", "23", "0,12"]),
    "BYMINUTE": st.sampled_from(["0", "30", "59", "0,15,30,45"]),
    "BYSECOND": st.sampled_from(["0", "30"]),
    "BYSETPOS": st.sampled_from(["1", "-1", "2"]),
}


@st.composite
def rrules(draw: st.DrawFn) -> str:
    names = draw(st.sets(st.sampled_from(sorted(set(RRULE_PARTS) - {"FREQ"})), max_size=3))
    parts = ["FREQ", *sorted(names)]
    return ";".join(f"{name}={draw(RRULE_PARTS[name])}" for name in parts)


starts = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1)).map(
    lambda d: d.replace(microsecond=0, tzinfo=UTC)
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rule=rrules(),
    start=st.none() | starts,
    zone=st.sampled_from(["UTC", AMS, "Australia/Lord_Howe"]),
    after=starts,
)
def test_accepted_rrule_evaluates_without_raising_and_fires(
    rule: str, start: datetime | None, zone: str, after: datetime
) -> None:
    try:
        sched = schedule(rrule_(rule), start_at=start, timezone=zone)
    except ValueError:
        return  # The shape check (pydantic) refused it: the API answers 422.
    if schedule_problem(sched) is not None:
        return
    first = (start or datetime(1970, 1, 1, tzinfo=UTC)) - timedelta(seconds=1)
    assert next_occurrences(sched, first, count=2), "an accepted rule fires"
    next_occurrences(sched, after, count=3)
    occurrences_between(sched, after, after + timedelta(days=40), limit=50)


CRON_ITEMS = {
    "minute": ["*", "0", "59", "*/7", "5-5", "50-10", "59/30", "H", "H(0-29)/25", "61", "1,2"],
    "hour": ["*", "0", "23", "2", "23-23", "*/5", "3-9/3", "H(0-23)/25", "H", "24"],
    "day": ["*", "1", "29", "30", "31", "L", "*/2", "H", "H(1-28)", "0", "1,15,30"],
    "month": ["*", "2", "feb", "2-2", "4,6,9,11", "*/3", "H", "13", "dec-jan"],
    "weekday": ["*", "0", "7", "5", "mon-fri", "5#5", "5#2", "5L", "L5", "*/2", "1/3", "H"],
}


@settings(max_examples=300, deadline=None)
@given(
    fields=st.fixed_dictionaries({k: st.sampled_from(v) for k, v in CRON_ITEMS.items()}),
    seconds=st.sampled_from(["", " 0", " */15", " H"]),
    schedule_id=st.sampled_from(["s11", "sched-33", "a"]),
    zone=st.sampled_from(["UTC", AMS, "Australia/Lord_Howe"]),
    after=starts,
)
def test_accepted_cron_evaluates_without_raising_and_fires(
    fields: dict[str, str], seconds: str, schedule_id: str, zone: str, after: datetime
) -> None:
    expression = " ".join(fields.values()) + seconds
    sched = schedule(cron(expression), schedule_id=schedule_id, timezone=zone)
    if schedule_problem(sched) is not None:
        return
    assert next_occurrences(sched, utc(1970, 1, 1), count=2), "an accepted expression fires"
    next_occurrences(sched, after, count=3)


# --- 6. `H` hashes the schedule's id in validation and evaluation alike -----------------


def test_hashed_step_wider_than_its_range_is_one_value() -> None:
    sched = schedule(cron("0 H(0-23)/25 * * *"), schedule_id="s11")
    assert schedule_problem(sched) is None
    found = ats(sched, utc(2026, 1, 1), count=2)
    assert len(found) == 2 and found[1] - found[0] == timedelta(days=1)


def test_hashed_day_that_february_lacks_is_refused() -> None:
    sched = schedule(cron("0 0 H 2 *"), schedule_id="sched-33")  # H lands on the 30th.
    assert "never" in (schedule_problem(sched) or "")


def test_validation_hashes_the_schedule_id() -> None:
    expression = "H H(0-5) * * *"
    first = ats(schedule(cron(expression), schedule_id="alpha"), utc(2026, 1, 1), count=1)
    second = ats(schedule(cron(expression), schedule_id="omega"), utc(2026, 1, 1), count=1)
    assert first != second  # Different ids, different hashed times.
    assert cron_problem("0 0 H 2 *", hash_id="sched-33") is not None
    assert cron_problem("0 0 H 2 *", hash_id="sched-1") is None


# --- 7. blackouts are jumped over, bounded, and never end a schedule --------------------


def window(recurrence: dict[str, str], seconds: int) -> dict[str, Any]:
    return {"recurrence": recurrence, "duration_seconds": seconds}


WEEKEND = window(cron("0 0 * * 6"), 2 * DAY)
SATURDAY = utc(2026, 3, 28)  # 2026-03-28 is a Saturday.
MONDAY = utc(2026, 3, 30)


def test_minutely_schedule_resumes_at_the_end_of_a_weekend_window() -> None:
    sched = schedule(cron("* * * * *"), exclusions=[WEEKEND])
    found = next_occurrences(sched, SATURDAY, count=3)
    # Held-back Sunday 23:59 would fire at Monday 00:00, as the regular run does: dropped.
    assert [(o.at, o.fire_at) for o in found] == [
        (MONDAY, MONDAY),
        (MONDAY + timedelta(minutes=1), MONDAY + timedelta(minutes=1)),
        (MONDAY + timedelta(minutes=2), MONDAY + timedelta(minutes=2)),
    ]


def test_window_holds_back_only_the_last_occurrence_and_drops_the_first() -> None:
    sched = schedule(cron("3/7 * * * *"), exclusions=[WEEKEND])
    seen = []
    for candidate in candidates(sched, SATURDAY - timedelta(seconds=1)):
        seen.append(candidate)
        if candidate.fire_at is not None:
            break
    # Minutes 3, 10, ..., 59: the first at Saturday 00:03, the last at Sunday 23:59.
    assert [(c.at, c.fire_at) for c in seen] == [
        (utc(2026, 3, 28, 0, 3), None),
        (utc(2026, 3, 29, 23, 59), MONDAY),
    ]


def test_occurrences_inside_a_window_are_not_examined_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = 0
    window_end = recurrence._window_end

    def counting(*args: Any) -> datetime | None:
        nonlocal calls
        calls += 1
        return window_end(*args)

    monkeypatch.setattr(recurrence, "_window_end", counting)
    sched = schedule(cron("* * * * *"), exclusions=[WEEKEND])
    assert len(next_occurrences(sched, SATURDAY, count=5)) == 5
    assert calls < 20  # The weekend holds 2,880 minutes.


def test_interval_schedule_comes_out_of_a_weekend_window() -> None:
    sched = schedule(every(seconds=5), exclusions=[WEEKEND])
    found = ats(sched, SATURDAY + timedelta(hours=3), count=5)
    assert found == [MONDAY + timedelta(seconds=5 * i) for i in range(5)]


@pytest.mark.parametrize(
    "rule", ["FREQ=MINUTELY;BYSECOND=0", "FREQ=MINUTELY;INTERVAL=30", "FREQ=HOURLY"]
)
def test_windows_that_never_leave_a_gap_cost_bounded_time(rule: str) -> None:
    sched = schedule(cron("* * * * *"), exclusions=[window(rrule_(rule), DAY)])
    started = time.perf_counter()
    assert next_occurrences(sched, SATURDAY, count=5) == []
    assert time.perf_counter() - started < 1.0  # Was 7 s to 157 s.
    last = list(candidates(sched, SATURDAY))[-1]
    assert last.unfinished and last.at > SATURDAY  # Not the end of the schedule.


def test_schedule_blacked_out_for_a_long_time_is_active_not_completed() -> None:
    # Daily windows of two days overlap into one endless blackout of a daily schedule.
    sched = schedule(
        cron("0 12 * * *"),
        exclusions=[window(cron("0 0 * * *"), 2 * DAY)],
        exclusion_action=ExclusionAction.SKIP,
    )
    state = created_state(sched, at=SATURDAY)
    assert state.next_fire_at is not None and state.next_fire_at > SATURDAY
    assert schedule_status(state) is ScheduleStatus.ACTIVE
    later = tick(state, state.next_fire_at).state
    assert later is not None and later.next_fire_at is not None
    assert later.next_fire_at > state.next_fire_at
    assert schedule_status(later) is ScheduleStatus.ACTIVE


def test_long_merged_blackout_defers_to_its_end() -> None:
    # Windows of 30 h every day from 00:00 overlap into one blackout until the last ends.
    windows = [window(cron("0 0 * 3 *"), 30 * 3600)]
    sched = schedule(cron("0 12 * * *"), exclusions=windows)
    found = next_occurrences(sched, utc(2026, 3, 10), count=2)
    # The last March window starts 03-31 00:00 and ends 04-01 06:00.
    assert [(o.at, o.fire_at) for o in found] == [
        (utc(2026, 3, 31, 12), utc(2026, 4, 1, 6)),
        (utc(2026, 4, 1, 12), utc(2026, 4, 1, 12)),
    ]
