"""From a scan result to a compliance state, and from a state to its scan interval.

A state's priority needs no rule of its own: it is read from the config
(`SchedulerConfig.priority`).
"""

from __future__ import annotations

from datetime import timedelta

from schemas.base import ComplianceState
from schemas.config import SchedulerConfig
from schemas.results import ScanCompleted, ScanStatus


def compliance_state(result: ScanCompleted | None) -> ComplianceState:
    """The state a host is in after its latest successful scan (rules in order)."""
    if result is None or result.status is not ScanStatus.SUCCEEDED:
        return ComplianceState.UNKNOWN
    if result.severity_critical_failed > 0 or result.severity_high_failed > 0:
        return ComplianceState.CRITICAL
    score = result.score
    if score is None:
        return ComplianceState.UNKNOWN
    if score >= 100:
        return ComplianceState.COMPLIANT
    if score >= 80:
        return ComplianceState.MOSTLY_COMPLIANT
    if score >= 50:
        return ComplianceState.PARTIAL
    if score >= 20:
        return ComplianceState.LOW
    return ComplianceState.CRITICAL


def interval_minutes(state: ComplianceState, config: SchedulerConfig) -> int:
    """The configured interval for `state`, never above the global ceiling."""
    return min(config.interval_minutes(state), config.max_interval_minutes)


def interval(state: ComplianceState, config: SchedulerConfig) -> timedelta:
    return timedelta(minutes=interval_minutes(state, config))
