"""The capacity forecast against small fleets whose future is worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from kairos.floor.forecast import (
    HostLoad,
    ScheduledLoad,
    forecast,
    measured_scan_seconds,
    percentile,
)

NOW = datetime(2030, 1, 1, 12, tzinfo=UTC)
MIN = timedelta(minutes=1)


def test_one_slot_three_hosts_the_third_misses_its_promise() -> None:
    # One slot, scans of 30 min (the median of the measured durations), three hosts due now
    # with a 60 min interval, last scanned 47 h 30 min ago: each must start within 30 min.
    # By hand: h1 runs 0-30, h2 30-60, h3 60-90 (too late), h1 again 90-120 (due 30+60),
    # h2 120-150, h3 150-180. Due per hour: 3 (all at 0), 1 (h1 at 90), 2 (h2 at 120, h3 at
    # 150); started: 2, 2, 2; waiting at each hour's end: 1, 0, 0.
    hosts = [
        HostLoad(host_id, NOW, 60 * MIN, last_scan_completed=NOW - timedelta(hours=47, minutes=30))
        for host_id in ("h1", "h2", "h3")
    ]
    result = forecast(
        now=NOW,
        hours=3,
        hosts=hosts,
        scheduled=[],
        max_concurrent_scans=1,
        scan_seconds=[1200, 1800, 1800, 1800, 3600],
    )
    assert (result.scan_seconds_p50, result.scan_seconds_p90) == (1800, 3600)
    assert [h.due for h in result.hourly] == [3, 1, 2]
    assert [h.started for h in result.hourly] == [2, 2, 2]
    assert [h.backlog for h in result.hourly] == [1, 0, 0]
    assert [(h.capacity, h.capacity_p90) for h in result.hourly] == [(2, 1)] * 3
    (miss,) = result.misses
    assert (miss.host_id, miss.deadline, miss.starts_at) == ("h3", NOW + 30 * MIN, NOW + 60 * MIN)
    assert not result.promise_kept


def test_a_second_slot_keeps_the_promise() -> None:
    hosts = [
        HostLoad(host_id, NOW, 60 * MIN, last_scan_completed=NOW - timedelta(hours=47, minutes=30))
        for host_id in ("h1", "h2", "h3")
    ]
    result = forecast(
        now=NOW, hours=3, hosts=hosts, scheduled=[], max_concurrent_scans=2, scan_seconds=[1800]
    )
    # h1, h2 at 0; h3 at 30 (= its deadline, not later).
    assert result.promise_kept and result.misses == ()
    assert result.hourly[0].capacity == 4


def test_schedule_commands_take_slots_and_push_a_host_past_its_promise() -> None:
    # Two slots, 60 min scans. A schedule sends 4 commands at 0 (higher priority); the host,
    # also due at 0, may start no later than 90 min (promise counted from 46 h 30 min ago).
    # By hand: the schedule's commands run 0-60 (two) and 60-120 (two); the host starts at
    # 120: a miss. Due in hour 0: 4 scheduled + 1 adaptive.
    host = HostLoad("late", NOW, timedelta(hours=24), NOW - timedelta(hours=46, minutes=30))
    burst = ScheduledLoad("inventory", NOW, commands=4, priority=9)
    result = forecast(
        now=NOW,
        hours=4,
        hosts=[host],
        scheduled=[burst],
        max_concurrent_scans=2,
        scan_seconds=[3600],
    )
    first = result.hourly[0]
    assert (first.adaptive_due, first.scheduled_due, first.started, first.backlog) == (1, 4, 2, 3)
    assert [h.started for h in result.hourly] == [2, 2, 1, 0]
    (miss,) = result.misses
    assert (miss.host_id, miss.starts_at) == ("late", NOW + 120 * MIN)


def test_with_the_promise_guard_the_host_goes_first_and_keeps_its_promise() -> None:
    # The same load, as the dispatcher ranks it with its promise guard (120 min by default):
    # the host's promise runs out 90 min from now, within the guard, so it takes a slot at 0.
    host = HostLoad("late", NOW, timedelta(hours=24), NOW - timedelta(hours=46, minutes=30))
    burst = ScheduledLoad("inventory", NOW, commands=4, priority=9)
    result = forecast(
        now=NOW,
        hours=4,
        hosts=[host],
        scheduled=[burst],
        max_concurrent_scans=2,
        scan_seconds=[3600],
        promise_guard=timedelta(minutes=120),
    )
    assert result.misses == ()
    assert [h.started for h in result.hourly] == [2, 2, 1, 0]


def test_a_host_never_reached_within_the_horizon_is_a_miss_without_a_start() -> None:
    hosts = [HostLoad(f"h{n}", NOW, timedelta(hours=24)) for n in range(5)]
    stale = HostLoad("stale", NOW, timedelta(hours=24), NOW - timedelta(hours=49))
    result = forecast(
        now=NOW,
        hours=2,
        hosts=[*hosts, stale],
        scheduled=[],
        max_concurrent_scans=0,
        scan_seconds=[],
    )
    (miss,) = result.misses
    assert miss.host_id == "stale" and miss.starts_at is None
    assert result.hourly[0].due == 6 and result.hourly[0].capacity == 0


@given(st.lists(st.floats(min_value=0.1, max_value=1e5), min_size=1, max_size=50))
def test_percentiles_are_measured_values_in_order(values: list[float]) -> None:
    p50, p90 = percentile(values, 0.5), percentile(values, 0.9)
    assert p50 in values and p90 in values and p50 <= p90


@given(
    st.integers(min_value=0, max_value=4),
    st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=12),
)
def test_every_due_command_is_started_or_waiting(cap: int, offsets: list[int]) -> None:
    hosts = [
        HostLoad(f"h{n}", NOW + offset * MIN, timedelta(hours=1))
        for n, offset in enumerate(offsets)
    ]
    result = forecast(
        now=NOW, hours=6, hosts=hosts, scheduled=[], max_concurrent_scans=cap, scan_seconds=[900]
    )
    due = sum(h.due for h in result.hourly)
    started = sum(h.started for h in result.hourly)
    assert started <= due and result.hourly[-1].backlog == due - started
    assert all(h.started <= h.capacity for h in result.hourly)


def test_a_scan_is_measured_from_its_start_when_the_agent_sent_one() -> None:
    done = NOW + 10 * MIN
    assert measured_scan_seconds(done, started_at=NOW + 7 * MIN, issued_at=NOW) == 180


def test_a_scan_without_a_start_is_measured_from_its_command_issue() -> None:
    done = NOW + 10 * MIN
    assert measured_scan_seconds(done, started_at=None, issued_at=NOW) == 600


def test_a_scan_with_neither_start_nor_command_or_a_backwards_span_measures_nothing() -> None:
    done = NOW + 10 * MIN
    assert measured_scan_seconds(done, started_at=None, issued_at=None) is None
    assert measured_scan_seconds(done, started_at=done, issued_at=NOW) is None
    assert measured_scan_seconds(done, started_at=None, issued_at=done + MIN) is None


def test_scans_measured_from_issue_replace_the_assumed_duration() -> None:
    # 52 results with no start, each 90 s after its command went out: the forecast uses 90 s,
    # not the 300 s it assumes when nothing is measured.
    spans = [
        measured_scan_seconds(NOW + timedelta(seconds=90), started_at=None, issued_at=NOW)
        for _ in range(52)
    ]
    result = forecast(
        now=NOW,
        hours=1,
        hosts=[],
        scheduled=[],
        max_concurrent_scans=2,
        scan_seconds=[s for s in spans if s is not None],
    )
    assert (result.scan_seconds_p50, result.measured_scans) == (90, 52)
    assert result.hourly[0].capacity == 80
