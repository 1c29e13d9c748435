"""When an alert is raised and when it is resolved: pure functions over plain data.

Alerts are level conditions with one open alert per (type, subject) at a time: a condition
that holds raises an alert unless one is open, and an open alert is resolved when its
condition no longer holds. `score_dropped` is the one edge: it is raised by a fall between
two results and resolved when the score climbs back to within the allowed drop of where it
fell from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from schemas.alerts import AlertType, SubjectType
from schemas.base import ComplianceState
from schemas.schedules import ScheduleState
from schemas.state import HostSchedule
from streams.policy.schedules import SYSTEM_ACTOR

HOST_ALERTS = (AlertType.SCORE_DROPPED, AlertType.BECAME_CRITICAL, AlertType.PAST_PROMISE)


@dataclass(frozen=True)
class RaiseAlert:
    alert_type: AlertType
    subject_type: SubjectType
    subject_id: str
    severity: str
    summary: str
    at: datetime
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ResolveAlert:
    alert_type: AlertType
    subject_id: str
    resolution: str
    at: datetime


AlertDecision = RaiseAlert | ResolveAlert


@dataclass(frozen=True)
class HostStep:
    """One projected change of a host: its state after the change (None: deleted), and when."""

    schedule: HostSchedule | None
    at: datetime


def host_alerts(
    host_id: str,
    score_before: float | None,
    steps: Sequence[HostStep],
    open_alerts: Mapping[AlertType, Mapping[str, Any]],
    *,
    score_drop: float,
    max_interval: timedelta,
) -> list[AlertDecision]:
    """The alerts `steps` (in version order) raise and resolve for one host.

    `open_alerts` maps each alert type open for the host to its details; `score_before` is
    the score the read model held before the first step.
    """
    decisions: list[AlertDecision] = []
    open_now = dict(open_alerts)
    previous = score_before

    def resolve(kind: AlertType, why: str, at: datetime) -> None:
        if open_now.pop(kind, None) is not None:
            decisions.append(ResolveAlert(kind, host_id, why, at))

    for step in steps:
        schedule = step.schedule
        if schedule is None or not schedule.is_active:
            why = "host deleted" if schedule is None else "host inactive"
            for kind in HOST_ALERTS:
                resolve(kind, why, step.at)
            continue
        critical = schedule.compliance_state is ComplianceState.CRITICAL
        if critical and AlertType.BECAME_CRITICAL not in open_now:
            open_now[AlertType.BECAME_CRITICAL] = {}
            decisions.append(
                RaiseAlert(
                    AlertType.BECAME_CRITICAL,
                    "host",
                    host_id,
                    "critical",
                    f"{host_id} is critical (score {_points(schedule.score)})",
                    step.at,
                    {"score": schedule.score, "scan_id": schedule.last_scan_id},
                )
            )
        elif not critical:
            resolve(
                AlertType.BECAME_CRITICAL,
                f"compliance state is {schedule.compliance_state.value}",
                step.at,
            )
        score = schedule.score
        if score is not None and score != previous:
            dropped = open_now.get(AlertType.SCORE_DROPPED)
            if previous is not None and previous - score > score_drop and dropped is None:
                details = {
                    "from_score": previous,
                    "to_score": score,
                    "scan_id": schedule.last_scan_id,
                }
                open_now[AlertType.SCORE_DROPPED] = details
                decisions.append(
                    RaiseAlert(
                        AlertType.SCORE_DROPPED,
                        "host",
                        host_id,
                        "warning",
                        f"{host_id}'s score fell from {_points(previous)} to {_points(score)}",
                        step.at,
                        details,
                    )
                )
            elif dropped is not None and score >= float(dropped["from_score"]) - score_drop:
                resolve(AlertType.SCORE_DROPPED, f"score recovered to {_points(score)}", step.at)
            previous = score
        if not promise_applies(schedule):
            resolve(AlertType.PAST_PROMISE, "host in maintenance", step.at)
        elif (schedule.last_scan_completed or schedule.created_at) >= step.at - max_interval:
            resolve(AlertType.PAST_PROMISE, "scanned within the promise", step.at)
    return decisions


def promise_applies(schedule: HostSchedule) -> bool:
    """The promise (a scan at least every max_interval) holds for active hosts in service."""
    return schedule.is_active and not schedule.maintenance_mode


def promised_since(now: datetime, max_interval: timedelta) -> datetime:
    """A host whose last successful scan (or creation) is older than this is past the promise."""
    return now - max_interval


def schedule_alert(
    schedule_id: str, state: ScheduleState | None, is_open: bool, at: datetime
) -> AlertDecision | None:
    """A schedule that disabled itself raises an alert until it is enabled again or deleted."""
    self_disabled = state is not None and not state.enabled and state.disabled_by == SYSTEM_ACTOR
    if self_disabled and not is_open:
        assert state is not None
        return RaiseAlert(
            AlertType.SCHEDULE_DISABLED,
            "schedule",
            schedule_id,
            "warning",
            f"schedule {state.schedule.name!r} disabled itself: {state.disabled_reason}",
            at,
            {"reason": state.disabled_reason, "consecutive_failures": state.consecutive_failures},
        )
    if is_open and not self_disabled:
        why = "schedule deleted" if state is None else "schedule enabled again"
        return ResolveAlert(AlertType.SCHEDULE_DISABLED, schedule_id, why, at)
    return None


@dataclass(frozen=True)
class CapWatch:
    """Since when commands in flight have been at the cap (None: they are not)."""

    saturated_since: datetime | None


def cap_saturation(
    watch: CapWatch,
    *,
    in_flight: int,
    cap: int,
    now: datetime,
    threshold: timedelta,
    is_open: bool,
    subject_id: str,
) -> tuple[CapWatch, AlertDecision | None]:
    """Raise when in flight has stayed at the cap for `threshold`; resolve when it drops below."""
    if in_flight < cap:
        resolved = (
            ResolveAlert(
                AlertType.CAP_SATURATED, subject_id, f"{in_flight} of {cap} in flight", now
            )
            if is_open
            else None
        )
        return CapWatch(None), resolved
    since = watch.saturated_since or now
    if is_open or now - since < threshold:
        return CapWatch(since), None
    minutes = int((now - since).total_seconds() // 60)
    return CapWatch(since), RaiseAlert(
        AlertType.CAP_SATURATED,
        "fleet",
        subject_id,
        "warning",
        f"{in_flight} of {cap} commands in flight for {minutes} min: hosts wait for a slot",
        now,
        {"in_flight": in_flight, "cap": cap, "saturated_since": since.isoformat()},
    )


def score_trend(
    host_id: str,
    scores: Sequence[float],
    is_open: bool,
    *,
    scans: int,
    at: datetime,
) -> AlertDecision | None:
    """Raise when each of the host's last `scans` scores is lower than the one before;
    resolve an open alert once the latest score is not lower than the one before it.

    `scores` are the host's latest scan scores, oldest first (at least `scans + 1` of them
    to see a trend); `at` is when the latest was scanned."""
    if len(scores) < 2:
        return None
    if is_open:
        if scores[-1] >= scores[-2]:
            return ResolveAlert(
                AlertType.SCORE_FALLING,
                host_id,
                f"score {'held at' if scores[-1] == scores[-2] else 'rose to'} "
                f"{_points(scores[-1])}",
                at,
            )
        return None
    recent = list(scores[-(scans + 1) :])
    if len(recent) < scans + 1 or any(later >= earlier for earlier, later in pairwise(recent)):
        return None
    return RaiseAlert(
        AlertType.SCORE_FALLING,
        "host",
        host_id,
        "warning",
        f"{host_id}'s score fell on each of its last {scans} scans: "
        + " > ".join(_points(score) for score in recent),
        at,
        {"scores": recent, "scans": scans},
    )


def organization_trend(
    organization: str,
    average_now: float | None,
    average_day_ago: float | None,
    open_details: Mapping[str, Any] | None,
    *,
    points: float,
    now: datetime,
) -> AlertDecision | None:
    """Raise when the organization's average score is more than `points` below what it was
    24 h ago; resolve an open alert once the average climbs above where it stood when the
    alert was raised (`open_details["to_average"]`), or when no average is left."""
    if open_details is not None:
        if average_now is None:
            return ResolveAlert(
                AlertType.ORG_SCORE_FALLING, organization, "no hosts scored now and a day ago", now
            )
        if average_now > float(open_details["to_average"]):
            return ResolveAlert(
                AlertType.ORG_SCORE_FALLING,
                organization,
                f"average score climbing again: {_points(round(average_now, 1))}",
                now,
            )
        return None
    if average_now is None or average_day_ago is None or average_day_ago - average_now <= points:
        return None
    fell = round(average_day_ago - average_now, 1)
    return RaiseAlert(
        AlertType.ORG_SCORE_FALLING,
        "organization",
        organization,
        "warning",
        f"{organization}'s average score fell {_points(fell)} points in 24 h: "
        f"{_points(round(average_day_ago, 1))} > {_points(round(average_now, 1))}",
        now,
        {"from_average": average_day_ago, "to_average": average_now, "fell": fell},
    )


def _points(score: float | None) -> str:
    return "-" if score is None else f"{score:g}"
