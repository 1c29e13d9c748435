"""Compliance state from a scan result, and interval/priority from a state."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.base import ComplianceState
from schemas.config import SchedulerConfig
from streams.policy.compliance import compliance_state, interval, interval_minutes
from tests.unit.factories import DEFAULT_CONFIG, NOW, scan_failed, scan_succeeded

FAST = settings(max_examples=150, deadline=None)


def succeeded(score: float | None, *, critical: int = 0, high: int = 0, medium: int = 0):
    result = scan_succeeded("cmd-1", completed_at=NOW, score=score, critical=critical, high=high)
    return result.model_copy(update={"severity_medium_failed": medium})


def test_no_result_is_unknown() -> None:
    assert compliance_state(None) is ComplianceState.UNKNOWN


def test_failed_scan_is_unknown_even_with_a_perfect_score() -> None:
    failed = scan_failed("cmd-1", completed_at=NOW).model_copy(update={"score": 100.0})
    assert compliance_state(failed) is ComplianceState.UNKNOWN


@pytest.mark.parametrize(
    ("score", "expected"),
    [
        (100.0, ComplianceState.COMPLIANT),
        (99.99, ComplianceState.MOSTLY_COMPLIANT),
        (80.0, ComplianceState.MOSTLY_COMPLIANT),
        (79.99, ComplianceState.PARTIAL),
        (50.0, ComplianceState.PARTIAL),
        (49.99, ComplianceState.LOW),
        (20.0, ComplianceState.LOW),
        (19.99, ComplianceState.CRITICAL),
        (0.0, ComplianceState.CRITICAL),
    ],
)
def test_score_bands_map_to_compliance_states(score: float, expected: ComplianceState) -> None:
    assert compliance_state(succeeded(score)) is expected


@pytest.mark.parametrize(("critical", "high"), [(1, 0), (0, 1), (3, 7)])
def test_critical_or_high_failure_is_critical_whatever_the_score(critical: int, high: int) -> None:
    assert compliance_state(succeeded(100.0, critical=critical, high=high)) is (
        ComplianceState.CRITICAL
    )


def test_medium_failures_do_not_override_the_score() -> None:
    assert compliance_state(succeeded(100.0, medium=12)) is ComplianceState.COMPLIANT


@pytest.mark.parametrize(
    ("state", "minutes", "priority"),
    [
        (ComplianceState.UNKNOWN, 0, 10),
        (ComplianceState.CRITICAL, 60, 9),
        (ComplianceState.LOW, 120, 7),
        (ComplianceState.PARTIAL, 360, 6),
        (ComplianceState.MOSTLY_COMPLIANT, 720, 4),
        (ComplianceState.COMPLIANT, 1440, 3),
        (ComplianceState.MAINTENANCE, 2880, 1),
    ],
)
def test_default_interval_and_priority_per_state(
    state: ComplianceState, minutes: int, priority: int
) -> None:
    assert interval_minutes(state, DEFAULT_CONFIG) == minutes
    assert interval(state, DEFAULT_CONFIG) == timedelta(minutes=minutes)
    assert DEFAULT_CONFIG.priority(state) == priority


def test_interval_is_capped_by_max_interval_minutes() -> None:
    config = SchedulerConfig(interval_compliant=1440, max_interval_minutes=90)
    assert interval_minutes(ComplianceState.COMPLIANT, config) == 90
    assert interval(ComplianceState.MAINTENANCE, config) == timedelta(minutes=90)
    assert interval_minutes(ComplianceState.CRITICAL, config) == 60  # Below the cap: unchanged.


def test_default_ceiling_is_the_48_hour_promise() -> None:
    assert DEFAULT_CONFIG.max_interval_minutes == 48 * 60


# --- properties ---------------------------------------------------------------------

configs = st.builds(
    SchedulerConfig,
    interval_unknown=st.integers(0, 2880),
    interval_critical=st.integers(15, 2880),
    interval_low=st.integers(30, 2880),
    interval_partial=st.integers(30, 2880),
    interval_mostly_compliant=st.integers(30, 2880),
    interval_compliant=st.integers(60, 2880),
    interval_maintenance=st.integers(60, 2880),
    max_interval_minutes=st.integers(1, 2880),
)


@FAST
@given(config=configs, state=st.sampled_from(ComplianceState))
def test_interval_never_exceeds_max_interval_minutes(
    config: SchedulerConfig, state: ComplianceState
) -> None:
    assert interval_minutes(state, config) <= config.max_interval_minutes
    assert interval(state, config) <= timedelta(minutes=config.max_interval_minutes)
    assert interval_minutes(state, config) == min(
        config.interval_minutes(state), config.max_interval_minutes
    )


@FAST
@given(
    score=st.floats(0, 100, allow_nan=False),
    critical=st.integers(0, 5),
    high=st.integers(0, 5),
)
def test_compliance_state_follows_the_rules_in_order(
    score: float, critical: int, high: int
) -> None:
    state = compliance_state(succeeded(score, critical=critical, high=high))
    if critical or high:
        expected = ComplianceState.CRITICAL
    elif score == 100:
        expected = ComplianceState.COMPLIANT
    elif score >= 80:
        expected = ComplianceState.MOSTLY_COMPLIANT
    elif score >= 50:
        expected = ComplianceState.PARTIAL
    elif score >= 20:
        expected = ComplianceState.LOW
    else:
        expected = ComplianceState.CRITICAL
    assert state is expected
    assert state is not ComplianceState.MAINTENANCE  # Only the host schedule sets that.
