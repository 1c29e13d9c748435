"""Alerts: conditions an operator should hear about, raised once and resolved when they clear.

Published on `alerts` (key = the subject's id: a host, a schedule, or `fleet`). Each message
carries an alert's whole current state; an alert is raised once, may be published again with
the same `alert_id` and `revision` after a crash (deduplicate by both), and ends with one
`resolved` message.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal
from uuid import UUID

from pydantic import Field

from schemas.base import Message, Timestamp


class AlertType(StrEnum):
    SCORE_DROPPED = "score_dropped"
    """A host's score fell by more than `alert_score_drop` points from one result to the next."""
    BECAME_CRITICAL = "became_critical"
    """A host's compliance state is critical."""
    PAST_PROMISE = "past_promise"
    """A host's last successful scan (or its creation) is older than `max_interval_minutes`."""
    SCHEDULE_DISABLED = "schedule_disabled"
    """A schedule disabled itself (too many failed runs in a row)."""
    CAP_SATURATED = "cap_saturated"
    """Commands in flight stayed at the cap for `alert_cap_saturated_minutes` or longer."""
    SCORE_FALLING = "score_falling"
    """A host's score fell on each of its last `alert_trend_scans` scans."""
    ORG_SCORE_FALLING = "org_score_falling"
    """An organization's average score fell by more than `alert_org_trend_points` in 24 h."""


class AlertState(StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"


SubjectType = Literal["host", "schedule", "fleet", "organization"]

FLEET_SUBJECT = "fleet"
"""The subject id of alerts about the whole fleet (the cap)."""


class AlertChanged(Message):
    """On `alerts`, key = subject_id: an alert was raised, or it was resolved."""

    kind: Literal["alert"] = "alert"
    alert_id: UUID = Field(description="Stays the same from raised to resolved.")
    revision: int = Field(ge=1, description="1 when raised, 2 when resolved.")
    alert_type: AlertType
    subject_type: SubjectType
    subject_id: str
    state: AlertState
    severity: Literal["warning", "critical"]
    summary: str = Field(description="One line for a human.")
    details: dict[str, Any] = Field(default_factory=dict)
    raised_at: Timestamp
    resolved_at: Timestamp | None = None
    resolution: str | None = Field(default=None, description="Why it was resolved.")
