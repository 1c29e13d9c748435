"""The sped-up clock: workers given the same origin and start agree on scheduler time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kairos.floor.clock import ScaledClock, SystemClock, clock_for_speed


def test_scaled_clock_shows_its_start_at_the_origin_and_runs_speed_times_faster() -> None:
    origin = datetime.now(UTC) - timedelta(seconds=2)
    start = datetime(2026, 3, 28, 23, tzinfo=UTC)
    clock = ScaledClock(3600.0, origin, start)
    shown = clock.now()
    # Two wall seconds (plus the test's own few milliseconds) at 3600x: two scheduler hours.
    assert start + timedelta(hours=2) <= shown < start + timedelta(hours=2, minutes=5)


def test_scaled_clock_without_a_start_counts_from_its_origin() -> None:
    origin = datetime.now(UTC) - timedelta(seconds=1)
    shown = ScaledClock(60.0, origin).now()
    assert origin + timedelta(minutes=1) <= shown < origin + timedelta(minutes=2)


def test_speed_one_is_the_system_clock_unless_a_start_is_given() -> None:
    assert isinstance(clock_for_speed(1.0), SystemClock)
    start = datetime(2026, 10, 24, tzinfo=UTC)
    moved = clock_for_speed(1.0, datetime.now(UTC), start)
    assert start <= moved.now() < start + timedelta(seconds=5)


def test_scaled_clock_refuses_a_speed_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        ScaledClock(0)
