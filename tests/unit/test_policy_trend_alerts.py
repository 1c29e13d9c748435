"""Trend alerts: a host whose score fell on each of its last N scans, an organization whose
average fell over a day; each resolved when the trend turns."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from schemas.alerts import AlertType
from streams.policy.alerts import RaiseAlert, ResolveAlert, organization_trend, score_trend

T0 = datetime(2030, 3, 1, 12, 0, tzinfo=UTC)


def test_three_falls_in_a_row_raise_a_falling_score() -> None:
    decision = score_trend("h1", [90, 80, 70, 60], False, scans=3, at=T0)
    assert isinstance(decision, RaiseAlert)
    assert decision.alert_type is AlertType.SCORE_FALLING and decision.subject_type == "host"
    assert decision.details == {"scores": [90, 80, 70, 60], "scans": 3}
    assert decision.summary == "h1's score fell on each of its last 3 scans: 90 > 80 > 70 > 60"
    assert decision.at == T0 and decision.severity == "warning"


def test_fewer_falls_than_configured_raise_nothing() -> None:
    assert score_trend("h1", [80, 70, 60], False, scans=3, at=T0) is None
    assert score_trend("h1", [100, 80, 70, 60], False, scans=4, at=T0) is None


def test_a_flat_step_breaks_the_trend() -> None:
    assert score_trend("h1", [90, 80, 80, 70], False, scans=3, at=T0) is None
    assert score_trend("h1", [90, 85, 80, 90, 70], False, scans=3, at=T0) is None


def test_only_the_last_scans_count() -> None:
    # An old rise does not hide the three falls that follow it.
    decision = score_trend("h1", [10, 95, 90, 85, 80], False, scans=3, at=T0)
    assert isinstance(decision, RaiseAlert)
    assert decision.details["scores"] == [95, 90, 85, 80]


def test_an_open_alert_resolves_on_a_scan_that_does_not_fall() -> None:
    rose = score_trend("h1", [90, 80, 70, 60, 65], True, scans=3, at=T0)
    assert rose == ResolveAlert(AlertType.SCORE_FALLING, "h1", "score rose to 65", T0)
    held = score_trend("h1", [90, 80, 70, 60, 60], True, scans=3, at=T0)
    assert isinstance(held, ResolveAlert) and held.resolution == "score held at 60"


def test_an_open_alert_stays_open_while_the_score_keeps_falling() -> None:
    assert score_trend("h1", [90, 80, 70, 60, 50], True, scans=3, at=T0) is None


def test_no_open_alert_is_raised_twice() -> None:
    assert score_trend("h1", [90, 80, 70, 60], True, scans=3, at=T0) is None


@given(
    scores=st.lists(st.integers(min_value=0, max_value=100), min_size=0, max_size=12),
    scans=st.integers(min_value=2, max_value=6),
)
def test_raised_exactly_when_the_last_scans_each_fell(scores: list[int], scans: int) -> None:
    decision = score_trend("h", [float(s) for s in scores], False, scans=scans, at=T0)
    tail = scores[-(scans + 1) :]
    falling = len(tail) == scans + 1 and all(b < a for a, b in zip(tail, tail[1:], strict=False))
    assert isinstance(decision, RaiseAlert) is falling
    assert decision is None or isinstance(decision, RaiseAlert)


def test_an_organization_whose_average_fell_more_than_the_points_raises() -> None:
    decision = organization_trend("acme", 70.0, 85.0, None, points=10, now=T0)
    assert isinstance(decision, RaiseAlert)
    assert decision.alert_type is AlertType.ORG_SCORE_FALLING
    assert decision.subject_type == "organization" and decision.subject_id == "acme"
    assert decision.details == {"from_average": 85.0, "to_average": 70.0, "fell": 15.0}
    assert decision.summary == "acme's average score fell 15 points in 24 h: 85 > 70"


def test_a_fall_within_the_points_or_without_history_raises_nothing() -> None:
    assert organization_trend("acme", 76.0, 85.0, None, points=10, now=T0) is None
    assert organization_trend("acme", 75.0, 85.0, None, points=10, now=T0) is None
    assert organization_trend("acme", 50.0, None, None, points=10, now=T0) is None
    assert organization_trend("acme", 90.0, 60.0, None, points=10, now=T0) is None


def test_an_open_organization_alert_resolves_once_the_average_climbs() -> None:
    details = {"from_average": 85.0, "to_average": 70.0, "fell": 15.0}
    assert organization_trend("acme", 68.0, 85.0, details, points=10, now=T0) is None
    assert organization_trend("acme", 70.0, 85.0, details, points=10, now=T0) is None
    climbed = organization_trend("acme", 72.0, 85.0, details, points=10, now=T0)
    assert isinstance(climbed, ResolveAlert) and climbed.subject_id == "acme"
    assert climbed.resolution == "average score climbing again: 72"
    gone = organization_trend("acme", None, None, details, points=10, now=T0)
    assert isinstance(gone, ResolveAlert) and gone.resolution == "no hosts scored now and a day ago"
