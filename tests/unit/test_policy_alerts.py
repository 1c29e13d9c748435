"""When alerts are raised and resolved: host steps, a schedule's own disabling, the cap."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from schemas.alerts import AlertType
from schemas.base import ComplianceState
from schemas.internal import ReleaseOutcome
from schemas.state import HostSchedule
from streams.policy.alerts import (
    CapWatch,
    HostStep,
    RaiseAlert,
    ResolveAlert,
    cap_saturation,
    host_alerts,
    schedule_alert,
)
from tests.unit.schedule_factories import (
    T0,
    created_state,
    disabled,
    dispatch,
    enabled,
    finish,
    fold,
    schedule,
    tick,
)

HOST = "web-1"
PROMISE = timedelta(hours=48)


def host(score: float | None, **fields: Any) -> HostSchedule:
    state = fields.pop("compliance_state", ComplianceState.PARTIAL)
    values: dict[str, Any] = {
        "host_id": HOST,
        "score": score,
        "compliance_state": state,
        "state": state,
        "next_scheduled_scan": T0,
        "last_scan_completed": T0,
        "created_at": T0 - timedelta(days=3),
        "updated_at": T0,
    }
    return HostSchedule(**(values | fields))


def steps(*schedules: HostSchedule | None, every: timedelta = timedelta(hours=1)) -> list[HostStep]:
    return [HostStep(schedule, T0 + every * n) for n, schedule in enumerate(schedules)]


def decide(
    score_before: float | None,
    changes: list[HostStep],
    open_alerts: dict[AlertType, dict[str, Any]] | None = None,
) -> list[RaiseAlert | ResolveAlert]:
    return host_alerts(
        HOST, score_before, changes, open_alerts or {}, score_drop=20, max_interval=PROMISE
    )


def test_a_fall_beyond_the_allowed_drop_raises_once_with_both_scores() -> None:
    (alert,) = decide(95, steps(host(60), host(50)))
    assert isinstance(alert, RaiseAlert)
    assert (alert.alert_type, alert.subject_id, alert.at) == (AlertType.SCORE_DROPPED, HOST, T0)
    assert alert.details["from_score"] == 95 and alert.details["to_score"] == 60
    assert alert.summary == "web-1's score fell from 95 to 60"


def test_a_fall_of_exactly_the_allowed_drop_raises_nothing() -> None:
    assert decide(80, steps(host(60))) == []


def test_the_first_score_of_a_host_raises_nothing() -> None:
    assert decide(None, steps(host(60))) == []


def test_an_open_drop_resolves_when_the_score_climbs_back_within_the_drop() -> None:
    opened = {AlertType.SCORE_DROPPED: {"from_score": 95.0}}
    assert decide(60, steps(host(70)), opened) == []  # 70 < 95 - 20: still fallen.
    (resolved,) = decide(60, steps(host(70), host(75)), opened)
    assert resolved == ResolveAlert(
        AlertType.SCORE_DROPPED, HOST, "score recovered to 75", T0 + timedelta(hours=1)
    )


def test_fall_and_recovery_in_one_batch_raise_then_resolve() -> None:
    raised, resolved = decide(95, steps(host(40), host(90)))
    assert isinstance(raised, RaiseAlert) and isinstance(resolved, ResolveAlert)
    assert raised.alert_type is resolved.alert_type is AlertType.SCORE_DROPPED


def test_critical_raises_while_critical_and_resolves_on_leaving_it() -> None:
    critical = host(10, compliance_state=ComplianceState.CRITICAL)
    decisions = decide(60, steps(critical, critical, host(90)))
    kinds = [(type(d).__name__, d.alert_type) for d in decisions]
    assert kinds == [
        ("RaiseAlert", AlertType.BECAME_CRITICAL),
        ("RaiseAlert", AlertType.SCORE_DROPPED),
        ("ResolveAlert", AlertType.BECAME_CRITICAL),
        ("ResolveAlert", AlertType.SCORE_DROPPED),
    ]
    assert decisions[0].severity == "critical"  # type: ignore[union-attr]
    assert decisions[2].resolution == "compliance state is partial"  # type: ignore[union-attr]


def test_an_open_critical_alert_is_not_raised_again() -> None:
    critical = host(10, compliance_state=ComplianceState.CRITICAL)
    assert decide(10, steps(critical), {AlertType.BECAME_CRITICAL: {}}) == []


def test_deleting_or_deactivating_a_host_resolves_all_its_alerts() -> None:
    opened: dict[AlertType, dict[str, Any]] = {
        AlertType.BECAME_CRITICAL: {},
        AlertType.PAST_PROMISE: {},
        AlertType.SCORE_DROPPED: {"from_score": 90.0},
    }
    gone = decide(10, steps(None), opened)
    assert {d.alert_type for d in gone} == set(opened)
    assert {d.resolution for d in gone if isinstance(d, ResolveAlert)} == {"host deleted"}
    inactive = decide(10, steps(host(10, is_active=False)), opened)
    assert {d.resolution for d in inactive if isinstance(d, ResolveAlert)} == {"host inactive"}


def test_past_promise_resolves_on_a_fresh_scan_or_maintenance_not_before() -> None:
    opened: dict[AlertType, dict[str, Any]] = {AlertType.PAST_PROMISE: {}}
    stale = host(60, last_scan_completed=T0 - PROMISE - timedelta(minutes=1))
    assert decide(60, [HostStep(stale, T0)], opened) == []
    (scanned,) = decide(60, [HostStep(host(60, last_scan_completed=T0), T0)], opened)
    assert isinstance(scanned, ResolveAlert) and scanned.resolution == "scanned within the promise"
    (resting,) = decide(
        60, [HostStep(stale.model_copy(update={"maintenance_mode": True}), T0)], opened
    )
    assert isinstance(resting, ResolveAlert) and resting.resolution == "host in maintenance"


def test_a_schedule_that_disabled_itself_raises_until_enabled_again() -> None:
    state = created_state(schedule(max_retries=0))
    first = T0 + timedelta(hours=1)  # The schedule's first occurrence.
    due = tick(state, first)
    assert due.state is not None
    (run,) = due.runs
    sent = dispatch(due.state, run, [HOST], now=first)
    failed = finish(
        sent, run, HOST, now=first, outcome=ReleaseOutcome.FAILED, error="agent crashed"
    ).state
    assert failed is not None and not failed.enabled and failed.disabled_by == "kairos"
    raised = schedule_alert(state.schedule.id, failed, False, T0)
    assert isinstance(raised, RaiseAlert) and raised.alert_type is AlertType.SCHEDULE_DISABLED
    assert "disabled itself" in raised.summary and "agent crashed" in raised.summary
    assert schedule_alert(state.schedule.id, failed, True, T0) is None  # Already open.
    again, _ = fold(failed, [(T0 + timedelta(hours=1), enabled())])
    assert again is not None and again.disabled_by is None
    resolved = schedule_alert(state.schedule.id, again, True, T0)
    assert isinstance(resolved, ResolveAlert) and resolved.resolution == "schedule enabled again"
    gone = schedule_alert(state.schedule.id, None, True, T0)
    assert isinstance(gone, ResolveAlert) and gone.resolution == "schedule deleted"


def test_a_schedule_an_operator_disabled_raises_nothing() -> None:
    state, _ = fold(created_state(schedule()), [(T0, disabled(reason="noisy"))])
    assert state is not None and not state.enabled and state.disabled_by != "kairos"
    assert schedule_alert(state.schedule.id, state, False, T0) is None


def saturation(
    watch: CapWatch, in_flight: int, minutes: int, *, is_open: bool = False
) -> tuple[CapWatch, RaiseAlert | ResolveAlert | None]:
    return cap_saturation(
        watch,
        in_flight=in_flight,
        cap=5,
        now=T0 + timedelta(minutes=minutes),
        threshold=timedelta(minutes=15),
        is_open=is_open,
        subject_id="fleet",
    )


def test_the_cap_raises_only_after_staying_saturated_for_the_threshold() -> None:
    watch, decision = saturation(CapWatch(None), 5, 0)
    assert watch.saturated_since == T0 and decision is None
    watch, decision = saturation(watch, 5, 14)
    assert decision is None
    watch, decision = saturation(watch, 5, 15)
    assert (
        isinstance(decision, RaiseAlert) and decision.details["saturated_since"] == T0.isoformat()
    )
    assert decision.summary == "5 of 5 commands in flight for 15 min: hosts wait for a slot"


def test_a_dip_below_the_cap_starts_the_wait_over_and_resolves_an_open_alert() -> None:
    watch, _ = saturation(CapWatch(None), 5, 0)
    watch, decision = saturation(watch, 4, 10)
    assert watch.saturated_since is None and decision is None
    watch, decision = saturation(watch, 5, 20)
    assert watch.saturated_since == T0 + timedelta(minutes=20) and decision is None
    _, resolved = saturation(watch, 3, 40, is_open=True)
    assert isinstance(resolved, ResolveAlert) and resolved.resolution == "3 of 5 in flight"
