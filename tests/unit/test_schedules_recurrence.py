"""Recurrence evaluation with written-out instants: DST days, RRULE, exclusions, jitter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.floor.recurrence import (
    cron_problem,
    exclusion_window_end,
    jitter_offset,
    next_occurrences,
    occurrences_between,
    rrule_problem,
    schedule_problem,
    timezone_problem,
)
from schemas.schedules import DstPolicy, ExclusionAction, Schedule
from tests.unit.schedule_factories import HOUR, T0, cron, every, rrule_, schedule

AMS = "Europe/Amsterdam"
AMSTERDAM = ZoneInfo(AMS)
LAST_WEEKDAY_AT_3 = "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=3;BYMINUTE=0;BYSECOND=0"


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def ats(sched: Schedule, after: datetime, count: int = 3) -> list[datetime]:
    return [o.at for o in next_occurrences(sched, after, count=count)]


def on_local_day(instants: list[datetime], day: tuple[int, int, int]) -> list[datetime]:
    return [i for i in instants if i.astimezone(AMSTERDAM).timetuple()[:3] == day]


# --- DST ------------------------------------------------------------------------------


def test_daily_2am_fires_once_at_3am_cest_on_spring_forward_day() -> None:
    sched = schedule(cron("0 2 * * *"), timezone=AMS)
    found = ats(sched, utc(2026, 3, 28, 12), count=3)
    # 02:00 does not exist on 2026-03-29; the run moves to 03:00 CEST = 01:00 UTC.
    assert found == [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0), utc(2026, 3, 31, 0)]
    assert len(on_local_day(found, (2026, 3, 29))) == 1


def test_daily_2am_fires_once_at_first_2am_on_fall_back_day() -> None:
    sched = schedule(cron("0 2 * * *"), timezone=AMS)
    found = ats(sched, utc(2026, 10, 24, 12), count=3)
    # 02:00 happens twice on 2026-10-25 (00:00 and 01:00 UTC); the first one runs.
    assert found == [utc(2026, 10, 25, 0), utc(2026, 10, 26, 1), utc(2026, 10, 27, 1)]
    assert len(on_local_day(found, (2026, 10, 25))) == 1


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (DstPolicy.RUN_ONCE_SHIFTED, [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)]),
        (DstPolicy.SKIP, [utc(2026, 3, 30, 0, 30), utc(2026, 3, 31, 0, 30)]),
        (DstPolicy.RUN_BOTH, [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)]),
    ],
)
def test_skipped_wall_time_follows_dst_policy(policy: DstPolicy, expected: list[datetime]) -> None:
    sched = schedule(cron("30 2 * * *"), timezone=AMS, dst_policy=policy)
    assert ats(sched, utc(2026, 3, 28, 12), count=2) == expected


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (DstPolicy.RUN_ONCE_SHIFTED, [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]),
        (DstPolicy.SKIP, [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]),
        (DstPolicy.RUN_BOTH, [utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30)]),
    ],
)
def test_repeated_wall_time_follows_dst_policy(policy: DstPolicy, expected: list[datetime]) -> None:
    sched = schedule(cron("30 2 * * *"), timezone=AMS, dst_policy=policy)
    assert ats(sched, utc(2026, 10, 24, 12), count=2) == expected


def test_shifted_runs_in_the_gap_collapse_into_one_at_the_gap_end() -> None:
    sched = schedule(cron("0,15,30,45 2 * * *"), timezone=AMS)
    found = on_local_day(ats(sched, utc(2026, 3, 28, 12), count=6), (2026, 3, 29))
    assert found == [utc(2026, 3, 29, 1)]


@pytest.mark.parametrize("day", [utc(2026, 3, 28, 22), utc(2026, 10, 24, 22)])
def test_subhourly_cron_keeps_real_time_spacing_across_dst(day: datetime) -> None:
    sched = schedule(cron("*/30 * * * *"), timezone=AMS)
    found = ats(sched, day, count=12)
    gaps = {later - earlier for earlier, later in zip(found, found[1:], strict=False)}
    assert gaps == {timedelta(minutes=30)}


def test_utc_schedule_ignores_amsterdam_dst() -> None:
    sched = schedule(cron("30 2 * * *"))
    assert ats(sched, utc(2026, 3, 28, 12), count=2) == [
        utc(2026, 3, 29, 2, 30),
        utc(2026, 3, 30, 2, 30),
    ]


def test_six_field_cron_takes_seconds_last() -> None:
    sched = schedule(cron("0 3 * * * 15"))
    assert ats(sched, T0, count=1) == [utc(2026, 3, 29, 3, 0, 15)]


# --- RRULE ----------------------------------------------------------------------------


def test_rrule_last_weekday_of_month_in_amsterdam() -> None:
    sched = schedule(rrule_(LAST_WEEKDAY_AT_3), timezone=AMS)
    assert ats(sched, utc(2026, 1, 1), count=5) == [
        utc(2026, 1, 30, 2),  # Friday, 03:00 CET
        utc(2026, 2, 27, 2),  # Friday
        utc(2026, 3, 31, 1),  # Tuesday, 03:00 CEST
        utc(2026, 4, 30, 1),  # Thursday
        utc(2026, 5, 29, 1),  # Friday: the 31st is a Sunday
    ]


def test_rrule_second_tuesday_with_bysetpos() -> None:
    sched = schedule(rrule_("RRULE:FREQ=MONTHLY;BYDAY=TU;BYSETPOS=2;BYHOUR=9"))
    assert ats(sched, utc(2026, 1, 1), count=3) == [
        utc(2026, 1, 13, 9),
        utc(2026, 2, 10, 9),
        utc(2026, 3, 10, 9),
    ]


def test_rrule_interval_phase_comes_from_start_at() -> None:
    start = utc(2026, 3, 2, 6)  # A Monday.
    sched = schedule(rrule_("FREQ=WEEKLY;INTERVAL=2"), start_at=start)
    assert ats(sched, utc(2027, 1, 1), count=2) == [utc(2027, 1, 4, 6), utc(2027, 1, 18, 6)]


# --- interval, start/end, max_runs ------------------------------------------------------


def test_interval_without_start_is_aligned_to_the_utc_epoch() -> None:
    sched = schedule(every(hours=6))
    assert ats(sched, utc(2026, 3, 29, 7, 30), count=3) == [
        utc(2026, 3, 29, 12),
        utc(2026, 3, 29, 18),
        utc(2026, 3, 30, 0),
    ]


def test_interval_counts_elapsed_time_from_start_at_across_dst() -> None:
    start = utc(2026, 3, 28, 9)  # 10:00 CET
    sched = schedule(every(days=1), start_at=start, timezone=AMS)
    found = ats(sched, start - HOUR, count=2)
    assert found == [start, start + timedelta(days=1)]
    assert found[1].astimezone(AMSTERDAM).hour == 11  # 24 h later is 11:00 CEST.


def test_start_at_is_inclusive_and_end_at_inclusive() -> None:
    sched = schedule(cron("0 * * * *"), start_at=utc(2026, 3, 29, 5), end_at=utc(2026, 3, 29, 8))
    assert ats(sched, T0, count=10) == [utc(2026, 3, 29, h) for h in (5, 6, 7, 8)]


def test_max_runs_counts_runs_already_made() -> None:
    sched = schedule(cron("0 * * * *"), max_runs=3)
    assert len(next_occurrences(sched, T0, count=10)) == 3
    assert ats(sched, T0, count=10)[-1] == utc(2026, 3, 29, 3)
    assert len(next_occurrences(sched, T0, count=10, runs_so_far=2)) == 1
    assert next_occurrences(sched, T0, count=10, runs_so_far=3) == []


def test_occurrences_between_is_half_open() -> None:
    sched = schedule(cron("0 * * * *"))
    found = occurrences_between(sched, utc(2026, 3, 29, 2), utc(2026, 3, 29, 5))
    assert [o.at for o in found] == [utc(2026, 3, 29, h) for h in (2, 3, 4)]


def test_trigger_only_schedule_has_no_occurrences() -> None:
    assert next_occurrences(schedule({"kind": "none"}), T0, count=5) == []


# --- jitter ---------------------------------------------------------------------------


def test_jitter_is_stable_bounded_and_spread() -> None:
    sched = schedule(cron("0 * * * *"), jitter_seconds=600)
    first = next_occurrences(sched, T0, count=24)
    again = next_occurrences(sched, T0, count=24)
    assert first == again
    delays = [o.fire_at - o.at for o in first]
    assert all(timedelta(0) <= d <= timedelta(seconds=600) for d in delays)
    assert len(set(delays)) > 1
    other = schedule(cron("0 * * * *"), jitter_seconds=600, schedule_id="sched-2")
    assert [o.fire_at for o in next_occurrences(other, T0, count=24)] != [o.fire_at for o in first]


def test_jitter_offset_depends_on_the_instant_not_its_offset() -> None:
    instant = utc(2026, 3, 29, 4)
    assert jitter_offset("s", instant, 300) == jitter_offset(
        "s", instant.astimezone(AMSTERDAM), 300
    )
    assert jitter_offset("s", instant, 0) == timedelta(0)


# --- exclusions -----------------------------------------------------------------------


def blackout(start_cron: str, minutes: int) -> dict[str, object]:
    return {"recurrence": cron(start_cron), "duration_seconds": minutes * 60}


def test_deferred_occurrences_collapse_into_one_run_at_window_end() -> None:
    sched = schedule(cron("0 * * * *"), exclusions=[blackout("0 2 * * *", 90)])
    found = next_occurrences(sched, utc(2026, 3, 29, 0, 30), count=3)
    assert [(o.at, o.fire_at, o.deferred) for o in found] == [
        (utc(2026, 3, 29, 1), utc(2026, 3, 29, 1), False),
        (utc(2026, 3, 29, 3), utc(2026, 3, 29, 3, 30), True),  # 02:00 and 03:00 held to 03:30
        (utc(2026, 3, 29, 4), utc(2026, 3, 29, 4), False),
    ]


def test_deferred_run_is_dropped_when_the_next_regular_run_is_at_window_end() -> None:
    sched = schedule(cron("0 * * * *"), exclusions=[blackout("0 2 * * *", 120)])
    assert ats(sched, utc(2026, 3, 29, 0, 30), count=3) == [
        utc(2026, 3, 29, 1),
        utc(2026, 3, 29, 4),
        utc(2026, 3, 29, 5),
    ]


def test_excluded_occurrences_are_skipped_with_skip_action() -> None:
    sched = schedule(
        cron("0 * * * *"),
        exclusions=[blackout("0 2 * * *", 90)],
        exclusion_action=ExclusionAction.SKIP,
    )
    found = next_occurrences(sched, utc(2026, 3, 29, 0, 30), count=3)
    assert [(o.at, o.fire_at) for o in found] == [
        (utc(2026, 3, 29, 1), utc(2026, 3, 29, 1)),
        (utc(2026, 3, 29, 4), utc(2026, 3, 29, 4)),
        (utc(2026, 3, 29, 5), utc(2026, 3, 29, 5)),
    ]


def test_rrule_weekend_window_holds_sunday_run_to_its_end() -> None:
    weekend = {
        "recurrence": rrule_("FREQ=WEEKLY;BYDAY=SA;BYHOUR=22;BYMINUTE=0;BYSECOND=0"),
        "duration_seconds": 10 * 3600,
    }
    sched = schedule(cron("0 2 * * *"), exclusions=[weekend])
    found = next_occurrences(sched, utc(2026, 3, 28, 12), count=2)  # Saturday noon.
    assert [(o.at, o.fire_at) for o in found] == [
        (utc(2026, 3, 29, 2), utc(2026, 3, 29, 8)),
        (utc(2026, 3, 30, 2), utc(2026, 3, 30, 2)),
    ]


def test_exclusion_window_end_is_exclusive() -> None:
    sched = schedule(cron("0 * * * *"), exclusions=[blackout("0 2 * * *", 90)])
    assert exclusion_window_end(sched, utc(2026, 3, 29, 2)) == utc(2026, 3, 29, 3, 30)
    assert exclusion_window_end(sched, utc(2026, 3, 29, 3, 29)) == utc(2026, 3, 29, 3, 30)
    assert exclusion_window_end(sched, utc(2026, 3, 29, 3, 30)) is None
    assert exclusion_window_end(sched, utc(2026, 3, 29, 1, 59)) is None


def test_exclusion_windows_are_evaluated_in_the_schedule_timezone() -> None:
    sched = schedule(cron("0 * * * *"), timezone=AMS, exclusions=[blackout("0 9 * * *", 60)])
    # 09:00-10:00 CEST is 07:00-08:00 UTC on 2026-03-30.
    assert exclusion_window_end(sched, utc(2026, 3, 30, 7, 30)) == utc(2026, 3, 30, 8)
    assert exclusion_window_end(sched, utc(2026, 3, 30, 9, 30)) is None


# --- validation helpers -----------------------------------------------------------------


def test_cron_problem_quotes_the_expression() -> None:
    assert cron_problem("0 2 * * *") is None
    assert "'61 * * * *'" in (cron_problem("61 * * * *") or "")
    assert "3 fields" in (cron_problem("* * *") or "")
    assert "'0 0 31 2 *'" in (cron_problem("0 0 31 2 *") or "")  # February 31st never comes.


def test_rrule_problem_quotes_the_rule() -> None:
    assert rrule_problem(LAST_WEEKDAY_AT_3) is None
    assert "SOMETIMES" in (rrule_problem("FREQ=SOMETIMES") or "")
    assert "max_runs" in (rrule_problem("FREQ=DAILY;COUNT=3") or "")
    assert "end_at" in (rrule_problem("FREQ=DAILY;UNTIL=20270101T000000Z") or "")
    assert "BYHOUR=25" in (rrule_problem("FREQ=DAILY;BYHOUR=25") or "")
    assert "never" in (rrule_problem("FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30") or "")
    assert "INTERVAL" in (rrule_problem("FREQ=DAILY;INTERVAL=0") or "")


def test_timezone_problem_names_the_timezone() -> None:
    assert timezone_problem(AMS) is None
    assert "'Mars/Olympus_Mons'" in (timezone_problem("Mars/Olympus_Mons") or "")
    assert timezone_problem("../../etc/passwd") is not None


def test_schedule_problem_checks_the_meaning_pydantic_cannot() -> None:
    assert schedule_problem(schedule(cron("0 2 * * *"))) is None
    assert "'61 * * * *'" in (schedule_problem(schedule(cron("61 * * * *"))) or "")
    bad_window = schedule(cron("0 2 * * *"), exclusions=[blackout("0 25 * * *", 60)])
    assert "'0 25 * * *'" in (schedule_problem(bad_window) or "")


# --- properties -----------------------------------------------------------------------

RECURRENCES = [
    cron("0 2 * * *"),
    cron("30 2 * * *"),
    cron("*/20 * * * *"),
    cron("15 1-3 * * 0"),
    cron("0 0 1 * *"),
    rrule_("FREQ=DAILY;BYHOUR=2;BYMINUTE=30;BYSECOND=0"),
    rrule_("FREQ=HOURLY;INTERVAL=5"),
    rrule_(LAST_WEEKDAY_AT_3),
    every(minutes=45),
]
instants = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
)
schedules = st.builds(
    lambda recurrence, zone, policy, jitter, excluded: schedule(
        recurrence,
        timezone=zone,
        dst_policy=policy,
        jitter_seconds=jitter,
        exclusions=[blackout("0 1 * * *", 90)] if excluded else [],
    ),
    st.sampled_from(RECURRENCES),
    st.sampled_from(["UTC", AMS, "America/New_York", "Australia/Lord_Howe"]),
    st.sampled_from(list(DstPolicy)),
    st.sampled_from([0, 300]),
    st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(sched=schedules, after=instants)
def test_occurrences_are_strictly_increasing_and_after_the_start(
    sched: Schedule, after: datetime
) -> None:
    found = next_occurrences(sched, after, count=15)
    assert found, "a recurring schedule without end has a next occurrence"
    assert all(o.at > after and o.fire_at >= o.at for o in found)
    assert all(a.at < b.at for a, b in zip(found, found[1:], strict=False))


@settings(max_examples=40, deadline=None)
@given(sched=schedules, after=instants, split=st.integers(min_value=0, max_value=8))
def test_resuming_after_any_occurrence_continues_the_same_sequence(
    sched: Schedule, after: datetime, split: int
) -> None:
    whole = next_occurrences(sched, after, count=10)
    resumed = next_occurrences(sched, whole[split].at, count=10 - split - 1)
    assert resumed == whole[split + 1 :]


@settings(max_examples=30, deadline=None)
@given(sched=schedules, start=instants, hours=st.integers(min_value=1, max_value=72))
def test_between_agrees_with_next(sched: Schedule, start: datetime, hours: int) -> None:
    end = start + timedelta(hours=hours)
    between = occurrences_between(sched, start, end)
    following = next_occurrences(sched, start - timedelta(microseconds=1), count=len(between) + 1)
    assert between == [o for o in following if o.at < end]


@settings(max_examples=60, deadline=None)
@given(
    recurrence=st.sampled_from(RECURRENCES),
    jitter=st.sampled_from([0, 300]),
    excluded=st.booleans(),
    after=instants,
)
def test_utc_schedules_take_the_short_path_to_the_same_instants(
    recurrence: dict[str, str], jitter: int, excluded: bool, after: datetime
) -> None:
    # Etc/GMT never changes its offset either, but is read through the general path.
    def in_zone(zone: str) -> Schedule:
        exclusions = [blackout("0 1 * * *", 90)] if excluded else []
        return schedule(recurrence, timezone=zone, jitter_seconds=jitter, exclusions=exclusions)

    short = next_occurrences(in_zone("UTC"), after, count=12)
    assert short == next_occurrences(in_zone("Etc/GMT"), after, count=12)
    assert len(short) == 12


windows = st.sampled_from(
    [
        blackout("0 1 * * *", 90),
        blackout("30 2 * * *", 45),  # Starts in Amsterdam's DST gap and repeated hour.
        blackout("10 * * * *", 5),
        {"recurrence": rrule_("FREQ=WEEKLY;BYDAY=SA;BYHOUR=22"), "duration_seconds": 36_000},
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    recurrence=st.sampled_from(RECURRENCES),
    zone=st.sampled_from(["UTC", AMS]),
    window=windows,
    action=st.sampled_from(list(ExclusionAction)),
    after=instants,
)
def test_no_occurrence_fires_inside_a_blackout(
    recurrence: dict[str, str],
    zone: str,
    window: dict[str, object],
    action: ExclusionAction,
    after: datetime,
) -> None:
    sched = schedule(recurrence, timezone=zone, exclusions=[window], exclusion_action=action)
    for occurrence in next_occurrences(sched, after, count=12):
        assert exclusion_window_end(sched, occurrence.fire_at) is None
        held = exclusion_window_end(sched, occurrence.at) is not None
        assert occurrence.deferred == held
        assert action is ExclusionAction.DEFER or not held


def test_fully_blacked_out_schedule_yields_nothing_in_bounded_time() -> None:
    sched = schedule(
        cron("*/20 * * * *"),
        exclusions=[blackout("*/20 * * * *", 5)],
        exclusion_action=ExclusionAction.SKIP,
    )
    assert next_occurrences(sched, T0, count=3) == []
