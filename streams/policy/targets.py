"""Which hosts a schedule's run scans, and the commands it sends them.

`matches` evaluates a target filter over a plain view of a host; filters are data compared
in Python, never turned into SQL or code here. `select_targets` applies the target set,
activity, maintenance and the grace period; `dispatch_requests` turns the chosen hosts into
DispatchRequested messages with one deterministic command id per (schedule, occurrence, host,
attempt), and per backfill request for a backfilled run.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, NamedTuple

from schemas.base import CommandReason, ComplianceState, HostStatus
from schemas.internal import DispatchRequested
from schemas.objects import ObjectAttributes, Operation
from schemas.schedules import (
    HOST_OBJECT_TYPE,
    LABEL_FIELD_PREFIX,
    ORDERED_STATES,
    AllOf,
    AnyOf,
    Condition,
    FilterNode,
    FilterOp,
    RunPlan,
    RunReason,
    Schedule,
)
from schemas.state import HostSchedule

_SCHEDULE_COMMANDS = uuid.UUID("3d0f6c1e-7b52-4e9a-a8c4-2f95d1b7e6a3")
_MISSING = object()

HostView = Mapping[str, Any]
"""A host as filters see it: hostname, ip, os, organization, is_active, status, state, labels."""


class TargetSkip(StrEnum):
    """Why a host in a run's target set gets no command."""

    UNKNOWN_HOST = "unknown_host"
    INACTIVE = "inactive"
    DOWN = "down"
    MAINTENANCE = "maintenance"
    GRACE_PERIOD = "grace_period"


class TargetSelection(NamedTuple):
    """The hosts to scan (sorted) and the targeted hosts skipped, with the reason."""

    host_ids: tuple[str, ...]
    skipped: Mapping[str, TargetSkip]


# --- filters --------------------------------------------------------------------------


def host_view(host: HostSchedule) -> dict[str, Any]:
    """What a filter reads of a host. `state` is the compliance state of its last scan."""
    return {
        **_attributes_view(host.attributes),
        "is_active": host.is_active,
        "status": host.status.value,
        "state": host.compliance_state.value,
    }


def attributes_view(attributes: ObjectAttributes) -> dict[str, Any]:
    """What a filter reads of an object known only by its event attributes (state unknown)."""
    return {
        **_attributes_view(attributes),
        "is_active": attributes.is_active,
        "status": attributes.status.value,
        "state": ComplianceState.UNKNOWN.value,
    }


def matches(node: FilterNode | None, host: HostView | HostSchedule) -> bool:
    """Whether `host` passes the filter (None passes everything).

    A missing field is unequal to every value: `eq`, `in`, `prefix`, `glob`, `lt`, `gt` are
    false for it and `ne`, `not_in` true; `exists` tests presence.
    """
    if node is None:
        return True
    view = host_view(host) if isinstance(host, HostSchedule) else host
    if isinstance(node, AllOf):
        return all(matches(member, view) for member in node.all)
    if isinstance(node, AnyOf):
        return any(matches(member, view) for member in node.any)
    return _test(node, view)


def _attributes_view(attributes: ObjectAttributes) -> dict[str, Any]:
    return {
        "hostname": attributes.hostname,
        "ip": attributes.ip,
        "os": attributes.os,
        "organization": attributes.organization,
        "labels": dict(attributes.labels),
    }


def _read(view: HostView, field: str) -> object:
    if field.startswith(LABEL_FIELD_PREFIX):
        labels = view.get("labels") or {}
        return labels.get(field[len(LABEL_FIELD_PREFIX) :], _MISSING)
    value = view.get(field, _MISSING)
    return _MISSING if value is None else value


def _test(condition: Condition, view: HostView) -> bool:
    actual = _read(view, condition.field)
    op, expected = condition.op, condition.value
    if op is FilterOp.EXISTS:
        return (actual is not _MISSING) == (expected is not False)
    if op is FilterOp.NE:
        return actual is _MISSING or not _equal(actual, expected)
    if op is FilterOp.NOT_IN:
        values = expected if isinstance(expected, tuple) else (expected,)
        return actual is _MISSING or not any(_equal(actual, value) for value in values)
    if actual is _MISSING:
        return False
    if op is FilterOp.EQ:
        return _equal(actual, expected)
    if op is FilterOp.IN:
        values = expected if isinstance(expected, tuple) else (expected,)
        return any(_equal(actual, value) for value in values)
    if op is FilterOp.PREFIX:
        return isinstance(actual, str) and isinstance(expected, str) and actual.startswith(expected)
    if op is FilterOp.GLOB:
        return (
            isinstance(actual, str)
            and isinstance(expected, str)
            and fnmatch.fnmatchcase(actual, expected)
        )
    order = _compare(condition.field, actual, expected)
    if order is None:
        return False
    return order < 0 if op is FilterOp.LT else order > 0


def _equal(actual: object, expected: object) -> bool:
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected
    if isinstance(actual, str) and isinstance(expected, int | float):
        number = _number(actual)
        return number is not None and number == expected
    return actual == expected


def _compare(field: str, actual: object, expected: object) -> int | None:
    """-1, 0 or 1 comparing actual with expected; None when they have no common order."""
    if field == "state":
        states = [state.value for state in ORDERED_STATES]
        if actual not in states or expected not in states:
            return None
        left, right = states.index(str(actual)), states.index(str(expected))
        return (left > right) - (left < right)
    if field == "ip":
        try:
            a, b = ipaddress.ip_address(str(actual)), ipaddress.ip_address(str(expected))
        except ValueError:
            return None
        if a.version != b.version:
            return None
        return (int(a) > int(b)) - (int(a) < int(b))
    left_number, right_number = _number(actual), _number(expected)
    if left_number is not None and right_number is not None:
        return (left_number > right_number) - (left_number < right_number)
    if isinstance(actual, str) and isinstance(expected, str):
        return (actual > expected) - (actual < expected)
    return None


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


# --- selection ------------------------------------------------------------------------


def select_targets(
    schedule: Schedule,
    run: RunPlan,
    hosts: Iterable[HostSchedule],
    *,
    now: datetime,
    last_scan_by_scanner: Mapping[str, datetime],
) -> TargetSelection:
    """The hosts `run` scans, and the targeted hosts it skips.

    Targets: every host (or `targets.object_ids`) passing `targets.filter`; a trigger run
    only its object; a retry only its `host_ids`. Skipped: inactive, down, in maintenance
    (until `maintenance_until`), or scanned by this scanner less than grace_period_seconds
    ago (`last_scan_by_scanner`: host id -> when its last successful scan by
    `schedule.scanner` finished; not applied to retries). A host deleted by the triggering
    event is targeted by its event attributes, without these checks. Non-host object types
    take their ids as given. An empty result is a skipped run, not a failure.
    """
    targets = schedule.targets
    if targets.object_type != HOST_OBJECT_TYPE:
        wanted = (run.object_id,) if run.object_id else tuple(targets.object_ids or ())
        return TargetSelection(_narrowed(sorted(set(wanted)), run), {})

    known = {host.host_id: host for host in hosts}
    if run.object_id is not None:
        return _select_triggered(schedule, run, known, now, last_scan_by_scanner)

    skipped: dict[str, TargetSkip] = {}
    chosen: list[str] = []
    candidates = targets.object_ids if targets.object_ids is not None else tuple(known)
    for host_id in _narrowed(sorted(set(candidates)), run):
        host = known.get(host_id)
        if host is None:
            skipped[host_id] = TargetSkip.UNKNOWN_HOST
            continue
        if not matches(targets.filter, host):
            continue
        reason = _skip_reason(schedule, run, host, now, last_scan_by_scanner)
        if reason is None:
            chosen.append(host_id)
        else:
            skipped[host_id] = reason
    return TargetSelection(tuple(chosen), skipped)


def _select_triggered(
    schedule: Schedule,
    run: RunPlan,
    known: Mapping[str, HostSchedule],
    now: datetime,
    last_scan_by_scanner: Mapping[str, datetime],
) -> TargetSelection:
    object_id = run.object_id
    assert object_id is not None
    targets = schedule.targets
    if targets.object_ids is not None and object_id not in targets.object_ids:
        return TargetSelection((), {})
    host = known.get(object_id)
    attributes = run.object_attributes or ObjectAttributes()
    if run.operation is Operation.DELETED or host is None:
        # Gone, or not yet in the host table: judge it by what the event said.
        if not matches(targets.filter, attributes_view(attributes)):
            return TargetSelection((), {})
        if run.operation is not Operation.DELETED:
            if not attributes.is_active:
                return TargetSelection((), {object_id: TargetSkip.INACTIVE})
            if attributes.status is HostStatus.DOWN:
                return TargetSelection((), {object_id: TargetSkip.DOWN})
        return TargetSelection((object_id,), {})
    if not matches(targets.filter, host):
        return TargetSelection((), {})
    reason = _skip_reason(schedule, run, host, now, last_scan_by_scanner)
    if reason is not None:
        return TargetSelection((), {object_id: reason})
    return TargetSelection((object_id,), {})


def _narrowed(host_ids: list[str], run: RunPlan) -> tuple[str, ...]:
    if run.host_ids is None:
        return tuple(host_ids)
    allowed = set(run.host_ids)
    return tuple(host_id for host_id in host_ids if host_id in allowed)


def _skip_reason(
    schedule: Schedule,
    run: RunPlan,
    host: HostSchedule,
    now: datetime,
    last_scan_by_scanner: Mapping[str, datetime],
) -> TargetSkip | None:
    if not host.is_active:
        return TargetSkip.INACTIVE
    if host.status is HostStatus.DOWN:
        return TargetSkip.DOWN
    if host.maintenance_mode and (host.maintenance_until is None or host.maintenance_until > now):
        return TargetSkip.MAINTENANCE
    last_scan = last_scan_by_scanner.get(host.host_id)
    if (
        run.attempt == 1
        and schedule.grace_period_seconds > 0
        and last_scan is not None
        and now - last_scan < schedule.grace_period
    ):
        return TargetSkip.GRACE_PERIOD
    return None


# --- commands -------------------------------------------------------------------------


def occurrence_command_id(
    schedule_id: str,
    occurrence: datetime,
    host_id: str,
    attempt: int = 1,
    *,
    backfill_id: str | None = None,
) -> str:
    """One id per (schedule, occurrence, host, attempt), the same on every worker and replay.

    The occurrence is taken as an instant: the same moment written with another offset
    gives the same id. A retry (attempt 2, 3...) gets a new id, so scanners do not drop it;
    so does a backfilled run (`backfill_id`, its request's id), so an occurrence that ran
    before is sent again rather than dropped as a command already done.
    """
    instant = occurrence.astimezone(UTC).isoformat()
    name = f"{schedule_id}/{instant}/{host_id}/{attempt}"
    if backfill_id is not None:
        name += f"/backfill/{backfill_id}"
    return str(uuid.uuid5(_SCHEDULE_COMMANDS, name))


def occurrence_dispatch_request(
    schedule: Schedule,
    run: RunPlan,
    host_id: str,
    *,
    state: ComplianceState = ComplianceState.UNKNOWN,
) -> DispatchRequested:
    """The dispatch request for one host of `run`, due at the run's fire time."""
    reason = CommandReason.TRIGGER if run.reason is RunReason.TRIGGER else CommandReason.SCHEDULE
    return DispatchRequested(
        command_id=occurrence_command_id(
            schedule.id, run.occurrence, host_id, run.attempt, backfill_id=run.backfill_id
        ),
        host_id=host_id,
        priority=schedule.priority,
        due_at=run.due_at,
        reason=reason,
        state=state,
        attempt=run.attempt,
        scanner=schedule.scanner,
        schedule_id=schedule.id,
        args=dict(schedule.args),
    )


def dispatch_requests(
    schedule: Schedule,
    run: RunPlan,
    host_ids: Iterable[str],
    *,
    states: Mapping[str, ComplianceState] | None = None,
) -> tuple[DispatchRequested, ...]:
    """One request per host; the fan-out counts those it sends, and `run_dispatched` gets
    the run's total."""
    states = states or {}
    return tuple(
        occurrence_dispatch_request(
            schedule, run, host_id, state=states.get(host_id, ComplianceState.UNKNOWN)
        )
        for host_id in host_ids
    )
