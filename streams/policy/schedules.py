"""The life of one generic schedule: events and clock ticks fold into state plus runs.

Entry points, all pure (`now` is passed in, no I/O, nothing raises for a business reason);
the worker's adapter, `streams.stages.schedules`, stores and sends what they decide:

- `decide_schedule(state, event, now=...)`: a `schedule.*` event, or an object event that may
  start a trigger run (`trigger_matches` says which schedules to route it to).
- `due_runs(state, now=..., run_timeout=...)`: the wake-up at `wake_at(state)`. Retries,
  queued and buffered runs, then the occurrences `kairos.floor.recurrence.candidates` yields
  since the cursor, picked by the catch-up, max_runs and overlap policies.
- `run_dispatched(state, run, issued, now=...)`: every partition a tracked run was fanned out
  to has answered, `issued` commands in all (none: the run is skipped).
- `run_finished(state, occurrence, attempt, outcome=..., now=...)`: one command of a tracked
  run ended; the last one concludes the run.

Each returns a `ScheduleDecision`: the new state, runs to start, occurrences dropped, runs
concluded, events to publish, and why nothing happened.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kairos.floor.recurrence import (
    candidates,
    max_fire_delay,
    occurrences_between,
    schedule_problem,
)
from schemas.internal import ReleaseOutcome
from schemas.objects import ObjectEvent
from schemas.results import ERROR_MAX_CHARS
from schemas.schedules import (
    ActiveRun,
    BufferedRun,
    CatchupPolicy,
    NoRecurrence,
    OverlapPolicy,
    PendingRetry,
    QueuedRun,
    RunOutcome,
    RunPlan,
    RunReason,
    Schedule,
    ScheduleBackfillRequested,
    ScheduleDeleted,
    ScheduleDisabled,
    ScheduleEnabled,
    ScheduleEventType,
    SchedulePaused,
    ScheduleResumed,
    ScheduleState,
    ScheduleStatus,
    ScheduleTriggered,
    ScheduleUpserted,
)
from streams.policy.ids import message_id

MISFIRE_TOLERANCE = timedelta(seconds=60)
"""An occurrence started within this of its fire time is on time; later, it was missed."""
MAX_CATCHUP_RUNS = 100
"""CatchupPolicy.ALL starts at most this many missed occurrences (the latest ones)."""
MAX_BACKFILL_RUNS = 100
DUE_CANDIDATE_BUDGET = 5_000
"""Most occurrences one call examines; after a long outage the rest come in later calls."""
RETRY_BACKOFF_CAP = timedelta(minutes=60)
RECENT_EVENT_IDS_KEPT = 16
SYSTEM_ACTOR = "kairos"

ScheduleInput = ScheduleEventType | ObjectEvent

_TIMING_FIELDS = (
    "recurrence",
    "timezone",
    "start_at",
    "end_at",
    "dst_policy",
    "exclusions",
    "exclusion_action",
    "jitter_seconds",
)


@dataclass(frozen=True)
class DroppedOccurrence:
    """An occurrence that came due but did not run, and why (missed, coalesced, overlap...)."""

    occurrence: datetime
    reason: str


@dataclass(frozen=True)
class ConcludedRun:
    """A tracked run that ended, for the run history: how, and what its commands did."""

    occurrence: datetime
    attempt: int
    outcome: RunOutcome
    started_at: datetime
    manual: bool
    backfill: bool
    commands: int
    failed: int
    error: str | None


@dataclass(frozen=True)
class ScheduleDecision:
    """What one input did to one schedule.

    `state` is the state after the input (None: no such schedule, or it was deleted) and
    `changed` says whether it must be stored. `runs` are to be started now. `rejection`
    (invalid input, for dead-letters) and `ignored` (a harmless no-op) say why nothing
    happened. `events` are messages Kairos publishes itself (the self-disable). `dropped`
    are the occurrences that came due and will not run, `concluded` the runs that ended.
    """

    state: ScheduleState | None
    changed: bool = False
    runs: Sequence[RunPlan] = ()
    dropped: Sequence[DroppedOccurrence] = ()
    events: Sequence[ScheduleDisabled] = ()
    ignored: str | None = None
    rejection: str | None = None
    concluded: Sequence[ConcludedRun] = ()


@dataclass
class _Draft:
    """Mutable working copy of a state inside one decision."""

    values: dict[str, Any]
    now: datetime
    runs: list[RunPlan] = field(default_factory=list)
    dropped: list[DroppedOccurrence] = field(default_factory=list)
    events: list[ScheduleDisabled] = field(default_factory=list)
    concluded: list[ConcludedRun] = field(default_factory=list)

    @property
    def schedule(self) -> Schedule:
        schedule: Schedule = self.values["schedule"]
        return schedule


# --- entry points ---------------------------------------------------------------------


def decide_schedule(
    state: ScheduleState | None, event: ScheduleInput, *, now: datetime
) -> ScheduleDecision:
    """Fold one event into the schedule's state at instant `now`.

    Object events start a trigger run when the schedule's trigger matches; use
    `trigger_matches` to route only those. A redelivered event (same event_id) is ignored.
    """
    now = now.astimezone(UTC)
    if state is None:
        if isinstance(event, ScheduleUpserted | ScheduleDeleted) and event.expected_version:
            return ScheduleDecision(None, rejection=f"{STALE_WRITE}: the schedule no longer exists")
        if isinstance(event, ScheduleUpserted):
            return _create(event, now=now)
        return ScheduleDecision(None, ignored="unknown_schedule")
    if str(event.event_id) in state.recent_event_ids:
        return ScheduleDecision(state, ignored="duplicate_event")
    if isinstance(event, ScheduleUpserted | ScheduleDeleted):
        refused = _version_refusal(state, event)
        if refused is not None:
            return ScheduleDecision(state, rejection=refused)
    if isinstance(event, ScheduleDeleted):
        if state.schedule.is_system and not event.system:
            return ScheduleDecision(state, rejection="a system schedule cannot be deleted")
        return ScheduleDecision(None, changed=True)

    draft = _Draft(values=_values(state), now=now)
    ignored: str | None = None
    rejection: str | None = None
    match event:
        case ScheduleUpserted():
            rejection = _update(draft, event)
        case ScheduleEnabled():
            ignored = _enable(draft)
        case ScheduleDisabled():
            ignored = _disable(draft, event.reason or f"disabled by {event.actor}", event.actor)
        case SchedulePaused():
            ignored = _pause(draft, event)
        case ScheduleResumed():
            ignored = _resume(draft)
        case ScheduleTriggered():
            ignored = _trigger_manually(draft, event)
        case ScheduleBackfillRequested():
            ignored, rejection = _backfill(draft, event)
        case ObjectEvent():
            ignored = _trigger_on_object(draft, event)
    if rejection is not None:
        return ScheduleDecision(state, rejection=rejection)
    if ignored is None:
        _remember(draft, "recent_event_ids", str(event.event_id), RECENT_EVENT_IDS_KEPT)
    return _finish(state, draft, ignored=ignored)


def due_runs(
    state: ScheduleState,
    *,
    now: datetime,
    misfire_tolerance: timedelta = MISFIRE_TOLERANCE,
    run_timeout: timedelta | None = None,
) -> ScheduleDecision:
    """The runs that come due by `now`: retries, a buffered run, and occurrences.

    Occurrences since the last one dealt with are sorted into on time and missed; the
    catch-up policy picks which of them run, max_runs caps them and the overlap policy
    decides about runs in flight. Call it when `wake_at(state)` has come (an early call
    is harmless) and store the state. With `run_timeout`, a run in flight that started
    longer ago than that is concluded as failed first (its results may never come).
    """
    now = now.astimezone(UTC)
    if not state.enabled:
        return ScheduleDecision(state, ignored="disabled")
    if state.paused:
        return ScheduleDecision(state, ignored="paused")
    draft = _Draft(values=_values(state), now=now)
    if run_timeout is not None:
        _time_out_runs(draft, now - run_timeout)
    _advance(draft, misfire_tolerance=misfire_tolerance)
    nothing = not (draft.runs or draft.dropped or draft.events)
    return _finish(state, draft, ignored="nothing_due" if nothing else None)


def run_dispatched(
    state: ScheduleState, run: RunPlan, issued: int, *, now: datetime
) -> ScheduleDecision:
    """The worker selected the run's targets and sent `issued` commands, one per target.

    None issued means an empty target set: the run is recorded as skipped at once.
    Trigger runs are not tracked (ignored "untracked_run").
    """
    now = now.astimezone(UTC)
    if not run.tracked:
        return ScheduleDecision(state, ignored="untracked_run")
    draft = _Draft(values=_values(state), now=now)
    index = _find_run(draft, run.occurrence, run.attempt)
    if index is None:
        return ScheduleDecision(state, ignored="unknown_run")
    active: ActiveRun = draft.values["in_flight"][index]
    if active.dispatched:
        return ScheduleDecision(state, ignored="already_dispatched")
    _replace_run(
        draft, index, active.model_copy(update={"dispatched": True, "pending_commands": issued})
    )
    if not issued:
        _conclude(draft, index, RunOutcome.SKIPPED)
        _advance(draft, misfire_tolerance=MISFIRE_TOLERANCE)
    return _finish(state, draft, ignored=None)


def run_finished(
    state: ScheduleState,
    occurrence: datetime,
    attempt: int,
    *,
    outcome: ReleaseOutcome,
    now: datetime,
    host_id: str | None = None,
    error: str | None = None,
) -> ScheduleDecision:
    """One command of the tracked run (occurrence, attempt) ended; its last concludes the run.

    The caller reports each command once (the worker forgets a command as it reports it).
    Ignored: a run no longer in flight ("unknown_run"), one not yet dispatched
    ("not_dispatched": keep the report until it is) or with no command left ("no_pending").

    COMPLETED counts as success; FAILED and TIMED_OUT as failure (`host_id` names the host
    to retry; without it the retry covers every target); SUPERSEDED (host gone) as neither.
    A run whose commands were all superseded is skipped. The run ends succeeded with no
    failure, failed when its failures are more than the schedule's failure_threshold of its
    ended commands (or all of them), else partially_failed. A concluded run may release a
    buffered run or a retry, returned in `runs`.
    """
    now = now.astimezone(UTC)
    draft = _Draft(values=_values(state), now=now)
    index = _find_run(draft, occurrence, attempt)
    if index is None:
        return ScheduleDecision(state, ignored="unknown_run")
    active: ActiveRun = draft.values["in_flight"][index]
    if not active.dispatched:
        return ScheduleDecision(state, ignored="not_dispatched")
    if not active.pending_commands:
        return ScheduleDecision(state, ignored="no_pending")
    failed = outcome in (ReleaseOutcome.FAILED, ReleaseOutcome.TIMED_OUT)
    update: dict[str, Any] = {
        "pending_commands": active.pending_commands - 1,
        "finished": active.finished + (0 if outcome is ReleaseOutcome.SUPERSEDED else 1),
        "failed": active.failed + (1 if failed else 0),
    }
    if failed:
        update["last_error"] = _short(error or f"command {outcome.value}")
        if host_id is None:
            update["failed_unattributed"] = True
        elif host_id not in active.failed_host_ids:
            update["failed_host_ids"] = (*active.failed_host_ids, host_id)
    active = active.model_copy(update=update)
    _replace_run(draft, index, active)
    if not active.pending_commands:
        _conclude(draft, index, run_outcome(active, draft.schedule.failure_threshold))
        _advance(draft, misfire_tolerance=MISFIRE_TOLERANCE)
    return _finish(state, draft, ignored=None)


def run_outcome(active: ActiveRun, failure_threshold: float) -> RunOutcome:
    """How a run whose commands have all ended ends (see `run_finished`)."""
    failed = active.failed or (1 if active.failed_unattributed or active.failed_host_ids else 0)
    if not active.finished:
        return RunOutcome.FAILED if failed else RunOutcome.SKIPPED
    if not failed:
        return RunOutcome.SUCCEEDED
    if failed >= active.finished or failed / active.finished > failure_threshold:
        return RunOutcome.FAILED
    return RunOutcome.PARTIALLY_FAILED


def wake_at(state: ScheduleState) -> datetime | None:
    """When `due_runs` must look at this schedule again; None: only an input can wake it."""
    if not state.enabled or state.paused:
        return None
    times = [state.next_fire_at] if state.next_fire_at else []
    if state.retry is not None and not _blocked(state.schedule, state.in_flight):
        times.append(state.retry.due_at)
    return min(times) if times else None


def schedule_status(state: ScheduleState) -> ScheduleStatus:
    """What operators see: disabled, paused, completed (no occurrence will come) or active."""
    if not state.enabled:
        return ScheduleStatus.DISABLED
    if state.paused:
        return ScheduleStatus.PAUSED
    schedule = state.schedule
    finished = (
        not isinstance(schedule.recurrence, NoRecurrence)
        and schedule.trigger is None
        and state.next_fire_at is None
        and state.retry is None
        and state.buffered is None
        and not state.in_flight
    )
    return ScheduleStatus.COMPLETED if finished else ScheduleStatus.ACTIVE


def trigger_matches(schedule: Schedule, event: ObjectEvent) -> bool:
    """Whether `event` triggers a run of `schedule` (for routing object events)."""
    trigger = schedule.trigger
    return (
        trigger is not None
        and trigger.run_on == event.object_type
        and trigger.operation is event.operation
    )


def retry_delay(consecutive_failures: int) -> timedelta:
    """2^n minutes after the n-th failure in a row, never more than an hour."""
    exponent = min(max(consecutive_failures, 0), 6)
    return min(timedelta(minutes=2**exponent), RETRY_BACKOFF_CAP)


# --- events ---------------------------------------------------------------------------


STALE_WRITE = "stale write"
"""How a refused versioned write's reason starts: the API answers it 412."""
EXISTING_SCHEDULE = "schedule exists"
"""How a refused create's reason starts: the API answers it 409."""


def _version_refusal(state: ScheduleState, event: ScheduleUpserted | ScheduleDeleted) -> str | None:
    """Why a versioned write is refused where the state lives, or None: a create of a name that
    exists, or a change based on a version the schedule has moved past. The API checks its
    read model first, which lags: two writes based on the same version both pass it, and only
    the first may land."""
    if isinstance(event, ScheduleUpserted) and event.create_only:
        return f"{EXISTING_SCHEDULE}: a schedule named {state.schedule.name!r} exists; change it"
    expected = event.expected_version
    if expected is None:
        return None
    incarnation = event.expected_incarnation
    if incarnation is not None and incarnation != (state.incarnation or "0"):
        return f"{STALE_WRITE}: the schedule was deleted and created again since it was read"
    if expected != state.version:
        return (
            f"{STALE_WRITE}: the schedule is at version {state.version}, the change was based"
            f" on version {expected}; read it again"
        )
    return None


def _create(event: ScheduleUpserted, *, now: datetime) -> ScheduleDecision:
    problem = schedule_problem(event.schedule)
    if problem:
        return ScheduleDecision(None, rejection=problem)
    state = ScheduleState(
        schedule=event.schedule,
        incarnation=str(event.event_id),
        cursor=now,
        recent_event_ids=(str(event.event_id),),
        created_at=now,
        updated_at=now,
    )
    draft = _Draft(values=_values(state), now=now)
    _plan_next(draft)
    return ScheduleDecision(ScheduleState.model_validate(draft.values), changed=True)


def _update(draft: _Draft, event: ScheduleUpserted) -> str | None:
    problem = schedule_problem(event.schedule)
    if problem:
        return problem
    before = draft.schedule
    if before.is_system and not event.schedule.is_system:
        return "a system schedule stays a system schedule"
    draft.values["schedule"] = event.schedule
    if any(getattr(before, name) != getattr(event.schedule, name) for name in _TIMING_FIELDS):
        # A new timetable starts now: occurrences the old one missed are not caught up.
        draft.values["cursor"] = max(draft.values["cursor"], draft.now)
    if event.schedule.overlap is not OverlapPolicy.BUFFER_ONE:
        draft.values["buffered"] = None
    _plan_next(draft)
    return None


def _enable(draft: _Draft) -> str | None:
    values = draft.values
    if values["enabled"]:
        return "already_enabled"
    values |= {
        "enabled": True,
        "disabled_reason": None,
        "disabled_by": None,
        "consecutive_failures": 0,
        "retry": None,
        "buffered": None,
        "cursor": max(values["cursor"], draft.now),  # The disabled time is not caught up.
    }
    _plan_next(draft)
    return None


def _disable(draft: _Draft, reason: str, actor: str) -> str | None:
    if not draft.values["enabled"]:
        return "already_disabled"
    draft.values |= {
        "enabled": False,
        "disabled_reason": _short(reason),
        "disabled_by": actor,
        "retry": None,
        "buffered": None,
    }
    return None


def _pause(draft: _Draft, event: SchedulePaused) -> str | None:
    if draft.values["paused"] and draft.values["pause_note"] == event.note:
        return "already_paused"
    draft.values |= {"paused": True, "pause_note": event.note}
    return None


def _resume(draft: _Draft) -> str | None:
    if not draft.values["paused"]:
        return "not_paused"
    draft.values |= {"paused": False, "pause_note": None}
    _advance(draft, misfire_tolerance=MISFIRE_TOLERANCE)  # Catch up the paused time.
    return None


def _trigger_manually(draft: _Draft, event: ScheduleTriggered) -> str | None:
    if not draft.values["enabled"]:
        return "disabled"
    occurrence = event.occurred_at.astimezone(UTC)
    if _find_run(draft, occurrence, 1) is not None:
        return "already_running"
    overlap = event.overlap or draft.schedule.overlap
    if overlap is not OverlapPolicy.ALLOW and draft.values["in_flight"]:
        if overlap is OverlapPolicy.SKIP:
            draft.dropped.append(DroppedOccurrence(occurrence, "overlap"))
            return "overlap"
        _buffer(draft, BufferedRun(occurrence=occurrence, due_at=draft.now, manual=True))
        return None
    _start(draft, occurrence=occurrence, due_at=draft.now, manual=True)
    return None


def _backfill(draft: _Draft, event: ScheduleBackfillRequested) -> tuple[str | None, str | None]:
    if not draft.values["enabled"]:
        return "disabled", None
    end = min(event.end.astimezone(UTC), draft.now)
    start = event.start.astimezone(UTC)
    if end <= start:
        return None, "backfill range lies in the future: nothing to run yet"
    found = occurrences_between(draft.schedule, start, end, limit=MAX_BACKFILL_RUNS + 1)
    if len(found) > MAX_BACKFILL_RUNS:
        return None, f"backfill covers more than {MAX_BACKFILL_RUNS} occurrences; split it"
    if not found:
        return "nothing_to_backfill", None
    busy = bool(draft.values["in_flight"] or draft.values["queued"])
    if busy and event.overlap is OverlapPolicy.SKIP:
        draft.dropped.extend(DroppedOccurrence(o.at, "overlap") for o in found)
        return None, None
    if busy and event.overlap is OverlapPolicy.BUFFER_ONE:
        draft.dropped.extend(DroppedOccurrence(o.at, "overlap") for o in found[:-1])
        found = found[-1:]
    # One after another, behind whatever is in flight (see QueuedRun). The request's id
    # keys their commands: an occurrence that ran before gets commands of its own.
    backfill_id = str(event.event_id)
    _queue(
        draft,
        [
            QueuedRun(occurrence=o.at, due_at=draft.now, backfill=True, backfill_id=backfill_id)
            for o in found
        ],
    )
    return None, None


def _trigger_on_object(draft: _Draft, event: ObjectEvent) -> str | None:
    schedule = draft.schedule
    if not trigger_matches(schedule, event):
        return "no_matching_trigger"
    if not draft.values["enabled"]:
        return "disabled"
    if draft.values["paused"]:
        return "paused"
    occurred = event.occurred_at.astimezone(UTC)
    if (schedule.start_at and occurred < schedule.start_at) or (
        schedule.end_at and occurred > schedule.end_at
    ):
        return "outside_active_period"
    draft.runs.append(
        RunPlan(
            schedule_id=schedule.id,
            occurrence=occurred,
            due_at=draft.now,
            reason=RunReason.TRIGGER,
            # The run history lists one incarnation's runs: without it, never shown.
            incarnation=draft.values["incarnation"],
            object_id=event.object_id,
            operation=event.operation,
            object_attributes=event.attributes,
        )
    )
    return None


# --- the clock: retries, buffered runs and occurrences ----------------------------------


def _advance(draft: _Draft, *, misfire_tolerance: timedelta) -> None:
    values = draft.values
    if not values["enabled"] or values["paused"]:
        return
    _release_retry(draft)
    # Queued occurrences are older than a buffered one: they go first, in order.
    _release_queued(draft)
    _release_buffered(draft)
    _fire_due_occurrences(draft, misfire_tolerance)


def _release_retry(draft: _Draft) -> None:
    retry: PendingRetry | None = draft.values["retry"]
    if retry is None or retry.due_at > draft.now:
        return
    if _blocked(draft.schedule, draft.values["in_flight"]):
        return  # Starts when the runs in flight have finished.
    draft.values["retry"] = None
    _start(
        draft,
        occurrence=retry.occurrence,
        due_at=retry.due_at,
        attempt=retry.attempt,
        manual=retry.manual,
        backfill=retry.backfill,
        backfill_id=retry.backfill_id,
        host_ids=retry.host_ids,
    )


def _release_buffered(draft: _Draft) -> None:
    buffered: BufferedRun | None = draft.values["buffered"]
    if buffered is None or draft.values["in_flight"]:
        return
    draft.values["buffered"] = None
    if not buffered.manual and _runs_left(draft) <= 0:
        draft.dropped.append(DroppedOccurrence(buffered.occurrence, "max_runs"))
        return
    if (
        _start(
            draft, occurrence=buffered.occurrence, due_at=buffered.due_at, manual=buffered.manual
        )
        and not buffered.manual
    ):
        _count_run(draft, buffered.occurrence)


def _release_queued(draft: _Draft) -> None:
    """The next queued occurrence, once nothing is in flight."""
    queued: tuple[QueuedRun, ...] = draft.values["queued"]
    if not queued or draft.values["in_flight"]:
        return
    first, *rest = queued
    draft.values["queued"] = tuple(rest)
    _start(
        draft,
        occurrence=first.occurrence,
        due_at=first.due_at,
        backfill=first.backfill,
        backfill_id=first.backfill_id,
    )


def _queue(draft: _Draft, runs: Sequence[QueuedRun]) -> tuple[QueuedRun, ...]:
    """Queue `runs` behind any already queued, and start the first if nothing is in flight.

    Returns the runs that were not queued already.
    """
    known = {(queued.occurrence, queued.backfill_id) for queued in draft.values["queued"]}
    fresh = tuple(run for run in runs if (run.occurrence, run.backfill_id) not in known)
    draft.values["queued"] = (*draft.values["queued"], *fresh)
    _release_queued(draft)
    return fresh


def _fire_due_occurrences(draft: _Draft, misfire_tolerance: timedelta) -> None:
    values, schedule, now = draft.values, draft.schedule, draft.now
    window = max(timedelta(seconds=schedule.catchup_window_seconds), misfire_tolerance)
    reach = misfire_tolerance if schedule.catchup is CatchupPolicy.SKIP else window
    # Occurrences this old can no longer run under the policy: pass over them unseen.
    lower = max(values["cursor"], now - reach - max_fire_delay(schedule))
    cursor = lower
    due = []
    exhausted = False
    for examined, candidate in enumerate(candidates(schedule, lower), start=1):
        if candidate.at > now:
            break
        if candidate.fire_at is not None and candidate.fire_at > now:
            break  # Held back (jitter, blackout): later ones wait behind it.
        cursor = candidate.at
        if candidate.fire_at is None:
            draft.dropped.append(DroppedOccurrence(candidate.at, "excluded"))
        else:
            due.append(candidate.occurrence())
        if examined >= DUE_CANDIDATE_BUDGET:
            exhausted = True
            break
    values["cursor"] = cursor

    on_time = [o for o in due if now - o.fire_at <= misfire_tolerance]
    in_window = [o for o in due if now - o.fire_at <= window]
    if exhausted:
        chosen = []  # Later occurrences are still to come: choose among them next call.
    elif schedule.catchup is CatchupPolicy.SKIP:
        chosen = on_time[-1:]
    elif schedule.catchup is CatchupPolicy.ONCE:
        chosen = in_window[-1:]
    else:
        chosen = in_window[-MAX_CATCHUP_RUNS:]
    counted = {o.at for o in (on_time if schedule.catchup is CatchupPolicy.SKIP else in_window)}
    running = {o.at for o in chosen}
    for occurrence in due:
        if occurrence.at not in running:
            # Too late for the policy: missed; a run stands for it: coalesced.
            reason = "coalesced" if occurrence.at in counted else "missed"
            draft.dropped.append(DroppedOccurrence(occurrence.at, reason))
    if exhausted:
        values["next_fire_at"] = now  # Call again at once to go on through the backlog.
        return
    left = _runs_left(draft)
    for occurrence in chosen[max(left, 0) :]:
        draft.dropped.append(DroppedOccurrence(occurrence.at, "max_runs"))
    chosen = chosen[: max(left, 0)]

    if chosen and _blocked(schedule, values["in_flight"]):
        if schedule.overlap is OverlapPolicy.BUFFER_ONE:
            latest = chosen.pop()
            _buffer(draft, BufferedRun(occurrence=latest.at, due_at=latest.fire_at))
        draft.dropped.extend(DroppedOccurrence(o.at, "overlap") for o in chosen)
        chosen = []
    if len(chosen) > 1 or (chosen and values["queued"]):
        # CatchupPolicy.ALL, or runs already waiting: one after another (see QueuedRun).
        queued = _queue(draft, [QueuedRun(occurrence=o.at, due_at=o.fire_at) for o in chosen])
        for run in queued:
            _count_run(draft, run.occurrence)
    elif chosen:
        (occurrence,) = chosen
        if _start(draft, occurrence=occurrence.at, due_at=occurrence.fire_at):
            _count_run(draft, occurrence.at)
    _plan_next(draft)


def _plan_next(draft: _Draft) -> None:
    """next_fire_at: the fire time of the first occurrence after the cursor, if any."""
    values = draft.values
    values["next_fire_at"] = None
    if _runs_left(draft) <= 0:
        return
    last_seen: datetime | None = None
    for examined, candidate in enumerate(candidates(draft.schedule, values["cursor"]), start=1):
        if candidate.fire_at is not None:
            values["next_fire_at"] = candidate.fire_at
            return
        last_seen = candidate.at
        if examined >= DUE_CANDIDATE_BUDGET or candidate.unfinished:
            # Everything examined was dropped (a long blackout is not the schedule's end):
            # wake then to move the cursor past it.
            values["next_fire_at"] = max(last_seen, draft.now)
            return


# --- runs -----------------------------------------------------------------------------


def _start(
    draft: _Draft,
    *,
    occurrence: datetime,
    due_at: datetime,
    attempt: int = 1,
    manual: bool = False,
    backfill: bool = False,
    backfill_id: str | None = None,
    host_ids: tuple[str, ...] | None = None,
) -> bool:
    """Start a run unless the same (occurrence, attempt) is in flight; whether it started."""
    if _find_run(draft, occurrence, attempt) is not None:
        draft.dropped.append(DroppedOccurrence(occurrence, "already_running"))
        return False
    active = ActiveRun(
        occurrence=occurrence,
        attempt=attempt,
        manual=manual,
        backfill=backfill,
        backfill_id=backfill_id,
        started_at=draft.now,
        host_ids=host_ids,
    )
    draft.values["in_flight"] = (*draft.values["in_flight"], active)
    draft.runs.append(
        RunPlan(
            schedule_id=draft.schedule.id,
            occurrence=occurrence,
            due_at=due_at,
            attempt=attempt,
            manual=manual,
            backfill=backfill,
            backfill_id=backfill_id,
            incarnation=draft.values["incarnation"],
            host_ids=host_ids,
        )
    )
    return True


def _count_run(draft: _Draft, occurrence: datetime) -> None:
    values = draft.values
    values["runs"] += 1
    values["last_occurrence"] = max(occurrence, values["last_occurrence"] or occurrence)
    values["last_fired_at"] = draft.now


def _buffer(draft: _Draft, buffered: BufferedRun) -> None:
    previous: BufferedRun | None = draft.values["buffered"]
    if previous is not None and previous.occurrence != buffered.occurrence:
        draft.dropped.append(DroppedOccurrence(previous.occurrence, "overlap"))
    draft.values["buffered"] = buffered


def _conclude(draft: _Draft, index: int, outcome: RunOutcome) -> None:
    """Remove run `index` from the runs in flight and account for its outcome."""
    values = draft.values
    active: ActiveRun = values["in_flight"][index]
    values["in_flight"] = tuple(r for i, r in enumerate(values["in_flight"]) if i != index)
    draft.concluded.append(
        ConcludedRun(
            occurrence=active.occurrence,
            attempt=active.attempt,
            outcome=outcome,
            started_at=active.started_at,
            manual=active.manual,
            backfill=active.backfill,
            commands=active.finished,
            failed=active.failed,
            error=active.last_error if outcome is not RunOutcome.SUCCEEDED else None,
        )
    )
    retry: PendingRetry | None = values["retry"]
    if outcome is RunOutcome.SKIPPED:
        values["skipped_runs"] += 1
        return
    if outcome in (RunOutcome.SUCCEEDED, RunOutcome.PARTIALLY_FAILED):
        # A few failed hosts of a run that worked are not a failing schedule: no backoff.
        succeeded = outcome is RunOutcome.SUCCEEDED
        counter = "succeeded_runs" if succeeded else "partially_failed_runs"
        values |= {
            counter: values[counter] + 1,
            "consecutive_failures": 0,
            "last_error": None if succeeded else active.last_error,
            "last_success_at": draft.now,
        }
        if retry is not None and retry.occurrence <= active.occurrence:
            values["retry"] = None  # A newer run succeeded: the retry has nothing to add.
        return
    failures = values["consecutive_failures"] + 1
    error = active.last_error or "run failed"
    values |= {
        "failed_runs": values["failed_runs"] + 1,
        "consecutive_failures": failures,
        "last_error": error,
    }
    schedule = draft.schedule
    if failures > schedule.max_retries:
        reason = _short(f"disabled after {failures} failed runs in a row; last error: {error}")
        if values["enabled"]:
            draft.events.append(
                ScheduleDisabled(
                    event_id=message_id(
                        "schedule-self-disabled",
                        schedule.id,
                        active.occurrence.isoformat(),
                        str(active.attempt),
                    ),
                    occurred_at=draft.now,
                    actor=SYSTEM_ACTOR,
                    schedule_id=schedule.id,
                    reason=reason,
                )
            )
        _disable(draft, reason, SYSTEM_ACTOR)
        return
    # Retry the hosts that failed; when unknown, every host this run covered.
    host_ids = active.host_ids
    if not active.failed_unattributed and active.failed_host_ids:
        host_ids = active.failed_host_ids
    values["retry"] = PendingRetry(
        occurrence=active.occurrence,
        attempt=active.attempt + 1,
        due_at=draft.now + retry_delay(failures),
        manual=active.manual,
        backfill=active.backfill,
        backfill_id=active.backfill_id,
        host_ids=host_ids,
    )


def _time_out_runs(draft: _Draft, started_before: datetime) -> None:
    while True:
        index = next(
            (
                i
                for i, active in enumerate(draft.values["in_flight"])
                if active.started_at < started_before
            ),
            None,
        )
        if index is None:
            return
        active = draft.values["in_flight"][index]
        timed_out = active.model_copy(
            update={"failed_unattributed": True, "last_error": "run timed out"}
        )
        _replace_run(draft, index, timed_out)
        _conclude(draft, index, RunOutcome.FAILED)


def _blocked(schedule: Schedule, in_flight: Sequence[ActiveRun]) -> bool:
    return bool(in_flight) and schedule.overlap is not OverlapPolicy.ALLOW


def _runs_left(draft: _Draft) -> int:
    max_runs = draft.schedule.max_runs
    return DUE_CANDIDATE_BUDGET if max_runs is None else max_runs - draft.values["runs"]


def _find_run(draft: _Draft, occurrence: datetime, attempt: int) -> int | None:
    for index, active in enumerate(draft.values["in_flight"]):
        if active.occurrence == occurrence and active.attempt == attempt:
            return index
    return None


def _replace_run(draft: _Draft, index: int, active: ActiveRun) -> None:
    runs = list(draft.values["in_flight"])
    runs[index] = active
    draft.values["in_flight"] = tuple(runs)


# --- bookkeeping ----------------------------------------------------------------------


def _values(state: ScheduleState) -> dict[str, Any]:
    return {name: getattr(state, name) for name in ScheduleState.model_fields}


def _remember(draft: _Draft, key: str, item: str, kept: int) -> None:
    draft.values[key] = (*draft.values[key], item)[-kept:]


def _short(text: str) -> str:
    return text[:ERROR_MAX_CHARS]


def _finish(before: ScheduleState, draft: _Draft, *, ignored: str | None) -> ScheduleDecision:
    values = draft.values
    if draft.dropped:
        counts = dict(values["dropped_occurrences"])
        for dropped in draft.dropped:
            counts[dropped.reason] = counts.get(dropped.reason, 0) + 1
        values["dropped_occurrences"] = counts
    unchanged = all(
        getattr(before, name) == values[name]
        for name in values
        if name not in ("version", "updated_at", "recent_event_ids")
    )
    if unchanged:
        kept = before.model_copy(update={"recent_event_ids": values["recent_event_ids"]})
        return ScheduleDecision(
            kept,
            changed=kept != before,
            runs=tuple(draft.runs),
            dropped=tuple(draft.dropped),
            events=tuple(draft.events),
            ignored=ignored,
            concluded=tuple(draft.concluded),
        )
    values["version"] = before.version + 1
    values["updated_at"] = draft.now
    return ScheduleDecision(
        ScheduleState.model_validate(values),
        changed=True,
        runs=tuple(draft.runs),
        dropped=tuple(draft.dropped),
        events=tuple(draft.events),
        ignored=ignored,
        concluded=tuple(draft.concluded),
    )
