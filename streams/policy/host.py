"""The adaptive schedule of one host: every input folds into a new state plus outputs.

`decide(schedule, event, now=..., config=..., scanner_busy=...)` is the single entry point;
`wake_at(schedule, config)` tells the due index when to look at the host again. `decide`
never raises for a business reason: inputs that change nothing come back as an `ignored`
reason, which the worker counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from schemas.base import CommandReason, ComplianceState, HostStatus, WithdrawReason
from schemas.changes import HostMaintenanceSet, HostScanRequested, HostStatusChanged
from schemas.commands import ADAPTIVE_SCANNER
from schemas.config import SchedulerConfig
from schemas.internal import (
    ClaimWithdrawn,
    CommandIssued,
    CommandTimedOut,
    CommandWithdrawn,
    DispatchRequested,
    HostDue,
    HostReplanRequested,
    IssuedBeforeForce,
    ReleaseOutcome,
    SlotReleased,
)
from schemas.objects import ObjectEvent, Operation
from schemas.results import ERROR_MAX_CHARS, ScanCompleted, ScanStatus
from schemas.state import HostSchedule
from streams.policy.compliance import compliance_state, interval, interval_minutes
from streams.policy.ids import command_id, event_fingerprint, spread_offset_seconds

HOST_OBJECT_TYPE = "host"
FORCE_PRIORITY = 10
RECENT_EVENT_IDS_KEPT = 8
MAX_INTERVAL_MINUTES = SchedulerConfig.model_fields["max_interval_minutes"].default
"""The promise when no config is at hand (a claim asked again after recovery)."""

HostInput = (
    ObjectEvent
    | HostMaintenanceSet
    | HostScanRequested
    | HostStatusChanged
    | ScanCompleted
    | HostDue
    | CommandIssued
    | IssuedBeforeForce
    | CommandWithdrawn
    | CommandTimedOut
    | HostReplanRequested
)


@dataclass(frozen=True)
class Decision:
    """What one input did to one host.

    `schedule` is the state after the input (None: the host does not exist or was deleted);
    `changed` says whether it must be stored and emitted.
    """

    schedule: HostSchedule | None
    changed: bool = False
    dispatch: Sequence[DispatchRequested] = ()
    releases: Sequence[SlotReleased] = ()
    withdrawals: Sequence[ClaimWithdrawn] = ()
    """Claims the dispatcher must drop if they still wait (the host left the scannable set)."""
    ignored: str | None = None
    held_busy: bool = False
    """Due, but a schedule's command of the adaptive scanner is in flight on the host: the
    claim waits until that command ends (one command per host and scanner)."""


@dataclass
class _Draft:
    """Mutable working copy used inside one decision."""

    values: dict[str, Any]
    scanner_busy: bool = False
    dispatch: list[DispatchRequested] = field(default_factory=list)
    releases: list[SlotReleased] = field(default_factory=list)
    withdrawals: list[ClaimWithdrawn] = field(default_factory=list)
    held_busy: bool = False


def decide(
    schedule: HostSchedule | None,
    event: HostInput,
    *,
    now: datetime,
    config: SchedulerConfig,
    scanner_busy: bool = False,
) -> Decision:
    """Fold `event` into `schedule` at instant `now` under `config`.

    `scanner_busy`: a generic schedule has a command of the adaptive scanner in flight on this
    host; a due claim (a forced one too) then waits for it to end.
    """
    # Read from the fields: `getattr` with a default on a model without the field (a wake)
    # goes through pydantic's `__getattr__`, which raises and catches: 7 of a wake's 34 µs.
    event_id = event.__dict__.get("event_id")
    if schedule is not None and event_id is not None:
        if event_fingerprint(event_id) in schedule.recent_event_ids:
            return Decision(
                schedule, ignored="duplicate_event", releases=_released_again(schedule, event)
            )

    if isinstance(event, ObjectEvent):
        return _on_object_event(schedule, event, now=now, config=config, scanner_busy=scanner_busy)
    if schedule is None:
        return Decision(None, ignored="unknown_host")

    draft = _Draft(values=_draft_values(schedule), scanner_busy=scanner_busy)
    _expire_maintenance(draft, now, config)
    ignored: str | None = None
    match event:
        case HostMaintenanceSet():
            _set_maintenance(draft, event, now=now, config=config)
        case HostScanRequested():
            ignored = _request_force(draft, now=now, config=config)
        case HostStatusChanged():
            if event.is_active is not None:
                draft.values["is_active"] = event.is_active
            if event.status is not None:
                draft.values["status"] = event.status
        case ScanCompleted():
            ignored = _record_result(draft, event, now=now, config=config)
        case CommandIssued():
            ignored = _record_issue(draft, event)
        case IssuedBeforeForce():
            ignored = _force_after(draft, event, now=now)
        case CommandTimedOut():
            ignored = _record_timeout(draft, event, now=now, config=config)
        case CommandWithdrawn():
            ignored = _record_withdrawal(draft, event, now=now)
        case HostReplanRequested():
            _replan(draft, event, now=now, config=config)
        case HostDue():
            pass  # Only the common tail below: expire maintenance, claim if due.

    _withdraw_if_held(draft)
    _claim_if_due(draft, now=now, config=config)
    decision = _finish(schedule, draft, event_id=event_id, now=now, ignored=ignored)
    if ignored == "stale_result":
        return replace(decision, releases=_released_again(schedule, event))
    return decision


def _released_again(schedule: HostSchedule, event: HostInput) -> tuple[SlotReleased, ...]:
    """A result read again, or one for a command no longer in flight, releases its command
    again. Its first release may never have reached the dispatcher: the worker can stop after
    the host's new state was written and before the release was, and the result, read again,
    is a duplicate. The dispatcher frees nothing for a command it no longer holds, nor for one
    of another host (`host_id`)."""
    if not isinstance(event, ScanCompleted) or event.scanner != ADAPTIVE_SCANNER:
        return ()
    if schedule.in_flight is not None and schedule.in_flight.command_id == event.command_id:
        return ()  # Still in flight here: its result has not been applied, so not released.
    return (
        SlotReleased(
            command_id=event.command_id,
            outcome=_outcome(event),
            host_id=schedule.host_id,
        ),
    )


def _outcome(result: ScanCompleted) -> ReleaseOutcome:
    if result.status is ScanStatus.SUCCEEDED:
        return ReleaseOutcome.COMPLETED
    return ReleaseOutcome.FAILED


def wake_at(schedule: HostSchedule, config: SchedulerConfig) -> datetime | None:
    """When the due index must look at this host again; None: only an event can wake it.

    Maintenance with an end wakes the host at that end whatever else holds it (a command in
    flight, inactive, down, the scheduler paused): the host must leave the `maintenance` state
    at that instant, not at its next scan or its next event.
    """
    scan = _next_scan_wake(schedule, config)
    if not schedule.maintenance_mode or schedule.maintenance_until is None:
        return scan
    ends = schedule.maintenance_until
    return ends if scan is None else min(ends, scan)


def _next_scan_wake(schedule: HostSchedule, config: SchedulerConfig) -> datetime | None:
    if schedule.in_flight is not None:
        return None  # The dispatcher owns the deadline; a result or timeout will come.
    if schedule.force_requested:
        return schedule.next_scheduled_scan
    if not (schedule.is_active and schedule.status is HostStatus.UP):
        return None  # A status change (an event) wakes it.
    if not config.enabled or schedule.maintenance_mode:
        return None  # Scheduled scans are held; toggling or leaving maintenance wakes it.
    return schedule.next_scheduled_scan


# --- inputs ---------------------------------------------------------------------


def _on_object_event(
    schedule: HostSchedule | None,
    event: ObjectEvent,
    *,
    now: datetime,
    config: SchedulerConfig,
    scanner_busy: bool,
) -> Decision:
    if event.object_type != HOST_OBJECT_TYPE:
        return Decision(schedule, ignored="not_a_host")
    if event.operation is Operation.DELETED:
        if schedule is None:
            return Decision(None, ignored="unknown_host")
        releases = []
        if schedule.in_flight is not None:
            releases.append(
                SlotReleased(
                    command_id=schedule.in_flight.command_id, outcome=ReleaseOutcome.SUPERSEDED
                )
            )
        return Decision(None, changed=True, releases=releases)

    attributes = event.attributes
    if schedule is None:
        first_due = now + timedelta(
            seconds=spread_offset_seconds(event.object_id, config.initial_spread_seconds)
        )
        draft = _Draft(
            values=_draft_values(
                HostSchedule(
                    host_id=event.object_id,
                    incarnation=str(event.event_id),
                    version=0,
                    state=ComplianceState.UNKNOWN,
                    compliance_state=ComplianceState.UNKNOWN,
                    current_interval_minutes=interval_minutes(ComplianceState.UNKNOWN, config),
                    next_scheduled_scan=first_due,
                    scan_priority=config.priority(ComplianceState.UNKNOWN),
                    is_active=attributes.is_active,
                    status=attributes.status,
                    attributes=attributes,
                    created_at=now,
                    updated_at=now,
                )
            ),
            scanner_busy=scanner_busy,
        )
        _claim_if_due(draft, now=now, config=config)
        return _finish(None, draft, event_id=event.event_id, now=now, ignored=None)

    draft = _Draft(values=_draft_values(schedule), scanner_busy=scanner_busy)
    draft.values["attributes"] = attributes
    draft.values["is_active"] = attributes.is_active
    draft.values["status"] = attributes.status
    _expire_maintenance(draft, now, config)
    _withdraw_if_held(draft)
    _claim_if_due(draft, now=now, config=config)
    return _finish(schedule, draft, event_id=event.event_id, now=now, ignored=None)


def _set_maintenance(
    draft: _Draft, event: HostMaintenanceSet, *, now: datetime, config: SchedulerConfig
) -> None:
    values = draft.values
    if event.enabled:
        values["maintenance_mode"] = True
        values["maintenance_until"] = (
            now + timedelta(hours=event.duration_hours) if event.duration_hours else None
        )
        values["state"] = ComplianceState.MAINTENANCE
        _show_plan(values, config)
    else:
        _leave_maintenance(draft, config)


def _request_force(draft: _Draft, *, now: datetime, config: SchedulerConfig) -> str | None:
    """Scan now, whatever the inventory says of the host's activity and status.

    An operator forces a scan of a host marked inactive or down to check it (the inventory may
    be stale); a scan that fails is retried by the usual rules, held while inactive or down.
    """
    values = draft.values
    in_flight = values["in_flight"]
    if in_flight is None:
        _force_now(values, now)
        return None
    if in_flight["issued_at"] is None:
        # Hosts are not told when their command is issued, so it may still wait for a slot or
        # be out already: ask for the same command at the front of the queue. A waiting one
        # moves up; one already out makes the dispatcher answer IssuedBeforeForce.
        in_flight["reason"] = CommandReason.FORCE
        in_flight["priority"] = FORCE_PRIORITY
        draft.dispatch.append(_dispatch_request(values, in_flight, config))
        return None
    # A claim an earlier version stored as issued: the force runs right after it completes.
    values["force_requested"] = True
    return None


def _force_now(values: dict[str, Any], now: datetime) -> None:
    """No command in flight: the forced scan is claimed by this very decision."""
    values["force_requested"] = True
    values["next_scheduled_scan"] = min(values["next_scheduled_scan"], now)


def _force_after(draft: _Draft, notice: IssuedBeforeForce, *, now: datetime) -> str | None:
    """The command went out before the force reached the dispatcher: scan again after it."""
    values = draft.values
    if notice.incarnation is not None and notice.incarnation != values["incarnation"]:
        # The host was deleted and created again since it asked: the new host never did.
        return "earlier_incarnation"
    in_flight = values["in_flight"]
    if in_flight is None:
        _force_now(values, now)  # That command has already ended (its result or timeout first).
        return None
    if in_flight["command_id"] != notice.command_id and in_flight["reason"] == CommandReason.FORCE:
        return "force_already_claimed"  # A forced command claimed since then meets it.
    values["force_requested"] = True  # Runs right after the command in flight completes.
    return None


def _record_result(
    draft: _Draft, result: ScanCompleted, *, now: datetime, config: SchedulerConfig
) -> str | None:
    values = draft.values
    in_flight = values["in_flight"]
    if in_flight is None or in_flight["command_id"] != result.command_id:
        return "stale_result"
    if result.scanner != ADAPTIVE_SCANNER:
        return "foreign_scanner"
    values["in_flight"] = None
    if result.status is ScanStatus.SUCCEEDED:
        state = compliance_state(result)
        values["compliance_state"] = state
        if not values["maintenance_mode"]:
            values["state"] = state
        values["score"] = result.score
        _show_plan(values, config)
        values["next_scheduled_scan"] = result.completed_at + interval(state, config)
        values["consecutive_scan_failures"] = 0
        values["last_scan_completed"] = result.completed_at
        values["last_scan_id"] = result.scan_id
        values["last_error"] = None
        values["due_instance"] += 1
        values["attempt"] = 1
    else:
        _schedule_retry(draft, error=result.error or "scan failed", now=now, config=config)
    draft.releases.append(SlotReleased(command_id=result.command_id, outcome=_outcome(result)))
    if values["force_requested"]:
        values["next_scheduled_scan"] = now
    return None


def _withdraw_if_held(draft: _Draft) -> None:
    """A host in maintenance, down or inactive is not scanned: its claim, if it may still wait
    for a slot, is withdrawn. Only the dispatcher knows whether it waits, so the host asks and
    keeps the claim until the answer (`CommandWithdrawn`); a claim already issued runs to its
    end. A forced claim is kept: a force overrides all three."""
    values = draft.values
    in_flight = values["in_flight"]
    if in_flight is None or in_flight["issued_at"] is not None:
        return
    if in_flight["withdrawing"] is not None or in_flight["reason"] == CommandReason.FORCE:
        return
    reason = _held_reason(values)
    if reason is None:
        return
    in_flight["withdrawing"] = reason
    draft.withdrawals.append(
        ClaimWithdrawn(command_id=in_flight["command_id"], host_id=values["host_id"], reason=reason)
    )


def _held_reason(values: dict[str, Any]) -> WithdrawReason | None:
    if values["maintenance_mode"]:
        return WithdrawReason.MAINTENANCE
    if not values["is_active"]:
        return WithdrawReason.INACTIVE
    if values["status"] is HostStatus.DOWN:
        return WithdrawReason.DOWN
    return None


def _record_withdrawal(draft: _Draft, notice: CommandWithdrawn, *, now: datetime) -> str | None:
    """The dispatcher dropped the claim before issuing it: the host forgets it, and claims
    again (with a new command id) as soon as it is scannable and due."""
    values = draft.values
    in_flight = values["in_flight"]
    if in_flight is None or in_flight["command_id"] != notice.command_id:
        return "stale_withdrawal"
    values["in_flight"] = None
    values["withdrawals"] += 1
    values["last_withdrawn"] = {
        "command_id": notice.command_id,
        "reason": notice.reason,
        "at": now,
    }
    return None


def _record_issue(draft: _Draft, issued: CommandIssued) -> str | None:
    in_flight = draft.values["in_flight"]
    if in_flight is None or in_flight["command_id"] != issued.command_id:
        return "stale_issue"
    if in_flight["issued_at"] is not None:
        return "duplicate_issue"
    in_flight["issued_at"] = issued.issued_at
    in_flight["deadline"] = issued.deadline
    return None


def _record_timeout(
    draft: _Draft, timeout: CommandTimedOut, *, now: datetime, config: SchedulerConfig
) -> str | None:
    in_flight = draft.values["in_flight"]
    if in_flight is None or in_flight["command_id"] != timeout.command_id:
        return "stale_timeout"
    draft.values["in_flight"] = None
    _schedule_retry(
        draft, error="scan timed out: no result by the deadline", now=now, config=config
    )
    if draft.values["force_requested"]:
        draft.values["next_scheduled_scan"] = now
    return None


def _replan(
    draft: _Draft, replan: HostReplanRequested, *, now: datetime, config: SchedulerConfig
) -> None:
    values = draft.values
    state: ComplianceState = values["compliance_state"]
    _show_plan(values, config)
    if values["in_flight"] is not None:
        return
    if replan.initialize and values["last_scan_completed"] is None:
        values["next_scheduled_scan"] = now
    elif values["last_scan_completed"] is not None and values["consecutive_scan_failures"] == 0:
        values["next_scheduled_scan"] = values["last_scan_completed"] + interval(state, config)


# --- shared steps -----------------------------------------------------------------


def _schedule_retry(draft: _Draft, *, error: str, now: datetime, config: SchedulerConfig) -> None:
    values = draft.values
    values["consecutive_scan_failures"] += 1
    values["attempt"] += 1
    values["last_error"] = error[:ERROR_MAX_CHARS]
    adaptive = config.scanner(ADAPTIVE_SCANNER)
    delay = adaptive.retry_delay_seconds if adaptive is not None else config.retry_delay_seconds
    values["next_scheduled_scan"] = now + timedelta(seconds=delay)


def _expire_maintenance(draft: _Draft, now: datetime, config: SchedulerConfig) -> None:
    until = draft.values["maintenance_until"]
    if draft.values["maintenance_mode"] and until is not None and until <= now:
        _leave_maintenance(draft, config)


def _leave_maintenance(draft: _Draft, config: SchedulerConfig) -> None:
    draft.values["maintenance_mode"] = False
    draft.values["maintenance_until"] = None
    draft.values["state"] = draft.values["compliance_state"]
    _show_plan(draft.values, config)


def _show_plan(values: dict[str, Any], config: SchedulerConfig) -> None:
    """The interval and priority the host shows: maintenance's while in it, else its state's.

    Scheduled scans stay held during maintenance (only a force scan runs); the
    `next_scheduled_scan` kept meanwhile is the one the compliance state gives, so the host
    is due at once when maintenance ends if that time has passed.
    """
    shown = (
        ComplianceState.MAINTENANCE if values["maintenance_mode"] else values["compliance_state"]
    )
    values["current_interval_minutes"] = interval_minutes(shown, config)
    values["scan_priority"] = config.priority(shown)


def _claim_if_due(draft: _Draft, *, now: datetime, config: SchedulerConfig) -> None:
    """Claim the host's next command when it is due; the dispatcher applies the global cap."""
    values = draft.values
    if values["in_flight"] is not None:
        return
    if values["next_scheduled_scan"] > now:
        return
    forced = values["force_requested"]
    scannable = values["is_active"] and values["status"] is not HostStatus.DOWN
    if not forced and (not scannable or not config.enabled or values["maintenance_mode"]):
        return
    if draft.scanner_busy:
        draft.held_busy = True
        return
    if forced:
        reason, priority, due_at = CommandReason.FORCE, FORCE_PRIORITY, now
    else:
        priority, due_at = values["scan_priority"], values["next_scheduled_scan"]
        if values["attempt"] > 1:
            reason = CommandReason.RETRY
        elif values["compliance_state"] is ComplianceState.UNKNOWN:
            reason = CommandReason.UNKNOWN
        else:
            reason = CommandReason.SCHEDULED
    # An `InFlightCommand`'s fields, validated with the schedule in `_finish` (a model built
    # here to be dumped at once cost 4 µs more per claim).
    in_flight = {
        "command_id": command_id(
            values["host_id"],
            values["due_instance"],
            values["attempt"],
            values["incarnation"],
            values["withdrawals"],
        ),
        "reason": reason,
        "priority": priority,
        "due_at": due_at,
        "attempt": values["attempt"],
        "claimed_at": now,
        "issued_at": None,
        "deadline": None,
        "withdrawing": None,
    }
    values["in_flight"] = in_flight
    values["force_requested"] = False
    draft.dispatch.append(_dispatch_request(values, in_flight, config))


def unissued_claim(
    schedule: HostSchedule, config: SchedulerConfig | None = None
) -> DispatchRequested | None:
    """After recovery: the request of the host's claim, which may never have reached the
    dispatcher (the dispatcher absorbs it if it is waiting, in flight or recently released);
    None when there is nothing to ask again. Claims are not marked issued any more, so this is
    every claim but those an earlier version stored as issued."""
    in_flight = schedule.in_flight
    if in_flight is None or in_flight.issued_at is not None:
        return None
    values = dict(schedule.__dict__)
    return _dispatch_request(values, in_flight.model_dump(), config)


def withdrawal_pending(schedule: HostSchedule) -> ClaimWithdrawn | None:
    """After recovery: the withdrawal the host asked for and has no answer to; asked again
    (after its claim's request, which recovery asks again first)."""
    in_flight = schedule.in_flight
    if in_flight is None or in_flight.withdrawing is None:
        return None
    return ClaimWithdrawn(
        command_id=in_flight.command_id, host_id=schedule.host_id, reason=in_flight.withdrawing
    )


def _dispatch_request(
    values: dict[str, Any], in_flight: dict[str, Any], config: SchedulerConfig | None = None
) -> DispatchRequested:
    forced = in_flight["reason"] == CommandReason.FORCE
    last_scan = values["last_scan_completed"] or values["created_at"]
    max_interval = config.max_interval_minutes if config is not None else MAX_INTERVAL_MINUTES
    return DispatchRequested(
        command_id=in_flight["command_id"],
        host_id=values["host_id"],
        priority=in_flight["priority"],
        due_at=in_flight["due_at"],
        reason=in_flight["reason"],
        state=values["state"],
        attempt=in_flight["attempt"],
        # Only a force request can be answered (IssuedBeforeForce), and the answer must say
        # which incarnation asked: the others leave it out.
        incarnation=values["incarnation"] if forced else None,
        organization=values["attributes"].organization,
        promise_at=last_scan + timedelta(minutes=max_interval),
    )


def _draft_values(schedule: HostSchedule) -> dict[str, Any]:
    """The schedule's fields as a decision edits them: the command in flight as a dict, which
    the policy fills in, and every other nested value (the attributes) as the model it is, which
    the policy only replaces whole.

    `model_dump` copied every nested model into dicts that `model_validate` then validated
    again; a model passed back is taken as it is."""
    values = dict(schedule.__dict__)
    if schedule.in_flight is not None:
        values["in_flight"] = schedule.in_flight.model_dump()
    return values


def _finish(
    before: HostSchedule | None,
    draft: _Draft,
    *,
    event_id: object,
    now: datetime,
    ignored: str | None,
) -> Decision:
    values = draft.values
    if event_id is not None:
        recent = (*values["recent_event_ids"], event_fingerprint(event_id))
        values["recent_event_ids"] = recent[-RECENT_EVENT_IDS_KEPT:]
    # A claim or a release is a change: `before` is dumped to compare only without either (a
    # result for the command in flight releases it, so its decision skips a second dump).
    unchanged = (
        before is not None
        and not draft.dispatch
        and not draft.releases
        and not draft.withdrawals
        and _same_schedule(_draft_values(before), values)
    )
    if unchanged:
        # Only the remembered event id may have moved; keep it without a new version.
        assert before is not None
        kept = before.model_copy(update={"recent_event_ids": values["recent_event_ids"]})
        return Decision(kept, changed=kept != before, ignored=ignored, held_busy=draft.held_busy)
    values["version"] = (before.version if before else 0) + 1
    values["updated_at"] = now
    return Decision(
        HostSchedule.model_validate(values),
        changed=True,
        dispatch=tuple(draft.dispatch),
        releases=tuple(draft.releases),
        withdrawals=tuple(draft.withdrawals),
        ignored=ignored,
        held_busy=draft.held_busy,
    )


def _same_schedule(before: dict[str, Any], after: dict[str, Any]) -> bool:
    ignored_keys = {"recent_event_ids", "version", "updated_at"}
    return all(before[key] == after[key] for key in before if key not in ignored_keys)
