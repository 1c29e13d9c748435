"""The schedule state machine: catch-up, overlap, outcomes, retries, triggers, lifecycle."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.internal import ReleaseOutcome
from schemas.objects import Operation
from schemas.schedules import (
    CatchupPolicy,
    OverlapPolicy,
    RunPlan,
    RunReason,
    ScheduleState,
    ScheduleStatus,
    load_schedule_state,
)
from streams.policy.schedules import (
    MAX_BACKFILL_RUNS,
    decide_schedule,
    due_runs,
    retry_delay,
    run_dispatched,
    schedule_status,
    trigger_matches,
    wake_at,
)
from streams.policy.targets import occurrence_command_id
from tests.unit.schedule_factories import (
    HOUR,
    MINUTE,
    T0,
    backfill,
    created_state,
    cron,
    deleted,
    disabled,
    dispatch,
    enabled,
    every,
    finish,
    fold,
    object_event,
    paused,
    resumed,
    schedule,
    tick,
    triggered,
    upserted,
)

SECOND = timedelta(seconds=1)


def at(hour: int, minute: int = 0) -> datetime:
    return T0 + timedelta(hours=hour, minutes=minute)


def hourly(**fields: Any) -> ScheduleState:
    return created_state(schedule(cron("0 * * * *"), **fields))


def occurrences(runs: Any) -> list[datetime]:
    return [run.occurrence for run in runs]


def started(state: ScheduleState, now: datetime) -> tuple[ScheduleState, RunPlan]:
    """`state` after the occurrence due at `now` started and was sent to host h1."""
    decision = tick(state, now)
    assert decision.state is not None and len(decision.runs) == 1, decision
    return dispatch(decision.state, decision.runs[0], ["h1"], now=now), decision.runs[0]


def failed_once(state: ScheduleState, now: datetime) -> tuple[ScheduleState, RunPlan]:
    state, run = started(state, now)
    decision = finish(state, run, "h1", now=now + MINUTE, outcome=ReleaseOutcome.FAILED)
    assert decision.state is not None
    return decision.state, run


# --- creation and ticks -----------------------------------------------------------------


def test_created_schedule_waits_for_its_first_occurrence() -> None:
    state = hourly()
    assert state.next_fire_at == at(1)
    assert wake_at(state) == at(1)
    assert schedule_status(state) is ScheduleStatus.ACTIVE
    early = due_runs(state, now=at(0, 59))
    assert early.runs == () and early.ignored == "nothing_due"


def test_occurrence_fires_at_its_time_and_the_next_is_planned() -> None:
    decision = due_runs(hourly(), now=at(1))
    assert [(r.occurrence, r.due_at, r.attempt, r.reason) for r in decision.runs] == [
        (at(1), at(1), 1, RunReason.SCHEDULE)
    ]
    state = decision.state
    assert state is not None
    assert state.runs == 1 and state.last_occurrence == at(1)
    assert state.next_fire_at == at(2)
    assert [r.occurrence for r in state.in_flight] == [at(1)]
    assert state.version == 2


def test_a_second_tick_at_the_same_instant_starts_nothing_new() -> None:
    first = due_runs(hourly(), now=at(1))
    assert first.state is not None
    again = due_runs(first.state, now=at(1))
    assert again.runs == () and again.state == first.state


def test_jittered_occurrence_waits_for_its_fire_time() -> None:
    state = hourly(jitter_seconds=1800)
    fire_at = state.next_fire_at
    assert fire_at is not None and at(1) < fire_at <= at(1, 30)
    assert due_runs(state, now=fire_at - SECOND).runs == ()
    decision = due_runs(state, now=fire_at)
    assert [(r.occurrence, r.due_at) for r in decision.runs] == [(at(1), fire_at)]


def test_blackout_defers_the_run_to_the_window_end() -> None:
    window = {"recurrence": cron("0 2 * * *"), "duration_seconds": 90 * 60}
    state, run = started(hourly(exclusions=[window]), at(1))
    assert state.next_fire_at == at(3, 30)
    state = finish(state, run, "h1", now=at(1, 10)).state  # type: ignore[assignment]
    at_two = due_runs(state, now=at(2))
    assert at_two.runs == ()
    assert at_two.state is not None
    decision = due_runs(at_two.state, now=at(3, 30), misfire_tolerance=MINUTE)
    assert [(r.occurrence, r.due_at) for r in decision.runs] == [(at(3), at(3, 30))]


# --- catch-up after an outage -----------------------------------------------------------


def test_catchup_skip_runs_none_of_the_missed_occurrences() -> None:
    decision = due_runs(hourly(catchup=CatchupPolicy.SKIP), now=at(5, 30))
    assert decision.runs == ()
    assert decision.state is not None
    assert decision.state.cursor >= at(5) and decision.state.next_fire_at == at(6)


def test_catchup_skip_still_runs_the_occurrence_that_is_on_time() -> None:
    decision = due_runs(hourly(catchup=CatchupPolicy.SKIP), now=at(5) + 30 * SECOND)
    assert occurrences(decision.runs) == [at(5)]
    assert decision.state is not None and decision.state.runs == 1


def test_catchup_skip_coalesces_several_on_time_occurrences() -> None:
    state = created_state(schedule(cron("* * * * * */10"), catchup=CatchupPolicy.SKIP))
    decision = due_runs(state, now=T0 + 35 * SECOND)
    assert occurrences(decision.runs) == [T0 + 30 * SECOND]
    assert [(d.occurrence, d.reason) for d in decision.dropped] == [
        (T0 + 10 * SECOND, "coalesced"),
        (T0 + 20 * SECOND, "coalesced"),
    ]


def test_catchup_once_runs_the_latest_missed_occurrence_once() -> None:
    decision = due_runs(hourly(catchup=CatchupPolicy.ONCE), now=at(5, 30))
    assert occurrences(decision.runs) == [at(5)]
    assert [(d.occurrence, d.reason) for d in decision.dropped] == [
        (at(h), "coalesced") for h in range(1, 5)
    ]
    assert decision.state is not None and decision.state.runs == 1


def test_catchup_once_runs_nothing_older_than_the_window() -> None:
    state = hourly(catchup=CatchupPolicy.ONCE, catchup_window_seconds=600)
    decision = due_runs(state, now=at(5, 30))
    # Occurrences older than the window are passed over without being listed.
    assert decision.runs == ()
    assert decision.state is not None
    assert decision.state.cursor >= at(5) and decision.state.next_fire_at == at(6)


def test_catchup_all_runs_every_missed_occurrence_within_the_window() -> None:
    state = hourly(catchup=CatchupPolicy.ALL, catchup_window_seconds=3 * 3600)
    decision = due_runs(state, now=at(5, 30))
    # One after another: each reaches every host (one command per host and scanner at a time).
    assert occurrences(decision.runs) == [at(3)]
    state_after = decision.state
    assert state_after is not None and state_after.runs == 3
    assert [q.occurrence for q in state_after.queued] == [at(4), at(5)]
    assert state_after.next_fire_at == at(6)
    started_next = []
    run = decision.runs[0]
    for minute in (40, 50):
        state_after = dispatch(state_after, run, ["h1"], now=at(5, minute - 5))
        ended = finish(state_after, run, "h1", now=at(5, minute))
        assert ended.state is not None
        (run,) = ended.runs
        started_next.append(run.occurrence)
        state_after = ended.state
    assert started_next == [at(4), at(5)] and state_after.queued == ()


def test_an_occurrence_due_while_catchup_runs_wait_joins_the_queue_once() -> None:
    state = hourly(
        catchup=CatchupPolicy.ALL, overlap=OverlapPolicy.ALLOW, catchup_window_seconds=3 * 3600
    )
    backlog = due_runs(state, now=at(2, 30))
    assert backlog.state is not None and [q.occurrence for q in backlog.state.queued] == [at(2)]
    decision = due_runs(backlog.state, now=at(3))
    # Not started beside the queue (and again from it later): it waits its turn.
    assert decision.runs == ()
    assert decision.state is not None
    assert [q.occurrence for q in decision.state.queued] == [at(2), at(3)]
    assert decision.state.runs == 3


def test_queued_catchup_runs_go_before_a_newer_buffered_occurrence() -> None:
    state = hourly(
        catchup=CatchupPolicy.ALL,
        overlap=OverlapPolicy.BUFFER_ONE,
        catchup_window_seconds=3 * 3600,
    )
    backlog = due_runs(state, now=at(2, 30))
    (first,) = backlog.runs
    assert backlog.state is not None
    held = due_runs(backlog.state, now=at(3))
    assert held.state is not None and held.state.buffered is not None
    started_next = []
    state, run = held.state, first
    for minute in (10, 20):
        state = dispatch(state, run, ["h1"], now=at(3, minute - 5))
        ended = finish(state, run, "h1", now=at(3, minute))
        assert ended.state is not None
        (run,) = ended.runs
        started_next.append(run.occurrence)
        state = ended.state
    assert [first.occurrence, *started_next] == [at(1), at(2), at(3)]


def test_catchup_after_a_month_long_outage_is_fast_and_runs_once() -> None:
    state = created_state(schedule(cron("* * * * *"), catchup_window_seconds=3600))
    decision = due_runs(state, now=T0 + timedelta(days=30, seconds=30))
    assert occurrences(decision.runs) == [T0 + timedelta(days=30)]
    assert decision.state is not None
    assert decision.state.next_fire_at == T0 + timedelta(days=30, minutes=1)


def test_a_backlog_beyond_one_call_still_runs_once() -> None:
    week = 7 * 86_400
    state = created_state(schedule(cron("* * * * *"), catchup_window_seconds=week))
    now = T0 + timedelta(days=8, seconds=30)
    started: list[datetime] = []
    for _ in range(10):
        decision = due_runs(state, now=now)
        assert decision.state is not None
        state = decision.state
        started += occurrences(decision.runs)
        if wake_at(state) != now:
            break
    assert started == [T0 + timedelta(days=8)]
    assert state.next_fire_at == T0 + timedelta(days=8, minutes=1)


def test_catchup_all_respects_max_runs() -> None:
    state = hourly(catchup=CatchupPolicy.ALL, max_runs=2)
    decision = due_runs(state, now=at(5, 30))
    assert occurrences(decision.runs) == [at(1)]
    assert decision.state is not None
    assert [q.occurrence for q in decision.state.queued] == [at(2)]
    assert [d.reason for d in decision.dropped if d.occurrence > at(2)] == ["max_runs"] * 3
    assert decision.state is not None and decision.state.next_fire_at is None


# --- overlap --------------------------------------------------------------------------


def test_overlap_skip_drops_an_occurrence_while_a_run_is_in_flight() -> None:
    state, _ = started(hourly(overlap=OverlapPolicy.SKIP), at(1))
    decision = due_runs(state, now=at(2))
    assert decision.runs == ()
    assert [(d.occurrence, d.reason) for d in decision.dropped] == [(at(2), "overlap")]
    assert decision.state is not None and decision.state.next_fire_at == at(3)


def test_overlap_buffer_one_keeps_the_latest_and_starts_it_when_the_run_ends() -> None:
    state, first = started(hourly(overlap=OverlapPolicy.BUFFER_ONE), at(1))
    for hour in (2, 3):
        decision = due_runs(state, now=at(hour))
        assert decision.runs == () and decision.state is not None
        state = decision.state
    assert state.buffered is not None and state.buffered.occurrence == at(3)
    assert [(d.occurrence, d.reason) for d in decision.dropped] == [(at(2), "overlap")]
    done = finish(state, first, "h1", now=at(3, 10))
    assert [(r.occurrence, r.due_at) for r in done.runs] == [(at(3), at(3))]
    assert done.state is not None
    assert done.state.buffered is None and done.state.runs == 2


def test_overlap_allow_starts_runs_side_by_side() -> None:
    state, _ = started(hourly(overlap=OverlapPolicy.ALLOW), at(1))
    decision = due_runs(state, now=at(2))
    assert occurrences(decision.runs) == [at(2)]
    assert decision.state is not None and len(decision.state.in_flight) == 2


def test_manual_trigger_follows_the_overlap_policy() -> None:
    state, _ = started(hourly(), at(1))
    decision = decide_schedule(state, triggered(at=at(1, 5)), now=at(1, 5))
    assert decision.runs == () and decision.ignored == "overlap"


# --- outcomes, retries, self-disable ------------------------------------------------------


def test_run_with_no_targets_is_skipped_not_failed() -> None:
    decision = due_runs(hourly(), now=at(1))
    assert decision.state is not None
    after = run_dispatched(decision.state, decision.runs[0], 0, now=at(1))
    state = after.state
    assert state is not None
    assert state.skipped_runs == 1 and state.failed_runs == 0
    assert state.consecutive_failures == 0 and state.retry is None and state.in_flight == ()


def test_a_result_before_the_run_is_dispatched_is_left_for_later() -> None:
    decision = due_runs(hourly(), now=at(1))
    assert decision.state is not None
    early = finish(decision.state, decision.runs[0], "h1", now=at(1, 1))
    assert early.ignored == "not_dispatched" and early.state == decision.state


def test_a_run_ends_with_its_last_command_and_ignores_one_more_report() -> None:
    decision = due_runs(hourly(), now=at(1))
    assert decision.state is not None
    run = decision.runs[0]
    state = dispatch(decision.state, run, ["h1", "h2"], now=at(1))
    one = finish(state, run, "h1", now=at(1, 5)).state
    assert one is not None and one.in_flight[0].pending_commands == 1
    both = finish(one, run, "h2", now=at(1, 6)).state
    assert both is not None and both.in_flight == () and both.last_success_at == at(1, 6)
    assert finish(both, run, "h2", now=at(1, 7)).ignored == "unknown_run"


def test_run_state_does_not_grow_with_the_hosts_it_covers() -> None:
    decision = due_runs(hourly(), now=at(1))
    assert decision.state is not None
    run = decision.runs[0]
    one_host = dispatch(decision.state, run, ["h1"], now=at(1))
    fleet = dispatch(decision.state, run, [f"h{n}" for n in range(50_000)], now=at(1))
    # The stored state is rewritten on every result: its size must not scale with the run.
    assert len(fleet.model_dump_json()) - len(one_host.model_dump_json()) < 8


def test_run_whose_hosts_all_vanished_is_skipped() -> None:
    state, run = started(hourly(), at(1))
    decision = finish(state, run, "h1", now=at(1, 5), outcome=ReleaseOutcome.SUPERSEDED)
    assert decision.state is not None
    assert decision.state.skipped_runs == 1 and decision.state.consecutive_failures == 0


def test_failed_run_retries_only_the_failed_host_after_two_minutes() -> None:
    decision = due_runs(hourly(failure_threshold=0), now=at(1))
    assert decision.state is not None
    run = decision.runs[0]
    state = dispatch(decision.state, run, ["h1", "h2"], now=at(1))
    state_after = finish(state, run, "h1", now=at(1, 5)).state
    assert state_after is not None
    failed = finish(
        state_after, run, "h2", now=at(1, 6), outcome=ReleaseOutcome.FAILED, error="no route"
    ).state
    assert failed is not None and failed.retry is not None
    assert failed.consecutive_failures == 1 and failed.last_error == "no route"
    assert failed.retry_at == at(1, 8)
    assert failed.retry.host_ids == ("h2",)
    assert wake_at(failed) == at(1, 8)
    retry = due_runs(failed, now=at(1, 8))
    assert [(r.occurrence, r.attempt, r.host_ids) for r in retry.runs] == [(at(1), 2, ("h2",))]
    first_id = occurrence_command_id(run.schedule_id, at(1), "h2", 1)
    assert occurrence_command_id(run.schedule_id, at(1), "h2", 2) != first_id


def test_backoff_doubles_from_two_minutes_and_stops_at_an_hour() -> None:
    assert [retry_delay(n) for n in range(1, 8)] == [
        timedelta(minutes=m) for m in (2, 4, 8, 16, 32, 60, 60)
    ]


def test_schedule_disables_itself_after_max_retries() -> None:
    state = hourly(max_retries=2)
    now = at(1)
    delays: list[timedelta] = []
    decision = None
    for attempt in (1, 2, 3):
        due = tick(state, now)  # The occurrence first, then each retry when it comes due.
        assert due.state is not None
        (run,) = due.runs
        assert run.attempt == attempt
        sent = dispatch(due.state, run, ["h1"], now=now)
        decision = finish(
            sent, run, "h1", now=now, outcome=ReleaseOutcome.FAILED, error="agent crashed"
        )
        assert decision.state is not None
        state = decision.state
        if state.retry is not None:
            delays.append(state.retry.due_at - now)
            now = state.retry.due_at
    assert delays == [timedelta(minutes=2), timedelta(minutes=4)]
    assert decision is not None
    assert not state.enabled and state.retry is None
    assert state.disabled_reason is not None
    assert "3 failed runs in a row" in state.disabled_reason
    assert "agent crashed" in state.disabled_reason
    assert schedule_status(state) is ScheduleStatus.DISABLED
    assert wake_at(state) is None
    (event,) = decision.events
    assert event.actor == "kairos" and event.schedule_id == state.schedule.id
    assert due_runs(state, now=at(5)).ignored == "disabled"
    assert decide_schedule(state, event, now=now).ignored == "already_disabled"


def test_self_disable_event_id_is_deterministic() -> None:
    state, run = started(hourly(max_retries=0), at(1))
    one = finish(state, run, "h1", now=at(1, 3), outcome=ReleaseOutcome.FAILED)
    two = finish(state, run, "h1", now=at(1, 3), outcome=ReleaseOutcome.FAILED)
    assert one.events[0].event_id == two.events[0].event_id


def test_skipped_runs_neither_count_nor_reset_failures() -> None:
    # Every minute, so the next runs come before the failed run's retry (2 minutes later).
    state, run = started(created_state(schedule(cron("* * * * *"))), at(0, 1))
    failed = finish(state, run, "h1", now=at(0, 1) + 30 * SECOND, outcome=ReleaseOutcome.FAILED)
    assert failed.state is not None and failed.state.retry_at == at(0, 3) + 30 * SECOND
    no_targets = tick(failed.state, at(0, 2))
    assert no_targets.state is not None
    skipped = run_dispatched(no_targets.state, no_targets.runs[0], 0, now=at(0, 2)).state
    assert skipped is not None
    assert skipped.consecutive_failures == 1 and skipped.skipped_runs == 1
    assert skipped.retry == failed.state.retry
    state, run = started(skipped, at(0, 3))
    assert state.retry is not None  # Not due yet: the success below drops it.
    succeeded = finish(state, run, "h1", now=at(0, 3)).state
    assert succeeded is not None
    assert succeeded.consecutive_failures == 0 and succeeded.retry is None


def test_second_outcome_for_the_same_run_is_ignored() -> None:
    state, run = failed_once(hourly(), at(1))
    again = finish(state, run, "h1", now=at(1, 2), outcome=ReleaseOutcome.FAILED)
    assert again.ignored == "unknown_run" and again.state == state


def test_enable_after_self_disable_starts_afresh_without_catching_up() -> None:
    state = hourly(max_retries=0)
    state, _ = failed_once(state, at(1))
    assert not state.enabled
    decision = decide_schedule(state, enabled(at=at(5, 30)), now=at(5, 30))
    state = decision.state  # type: ignore[assignment]
    assert state.enabled and state.consecutive_failures == 0
    assert state.next_fire_at == at(6)
    assert due_runs(state, now=at(5, 31)).runs == ()


def test_stale_run_times_out_and_frees_the_overlap_slot() -> None:
    state, _ = started(hourly(), at(1))
    decision = due_runs(state, now=at(4), run_timeout=2 * HOUR)
    assert occurrences(decision.runs) == [at(4)]
    assert decision.state is not None
    assert decision.state.consecutive_failures == 1
    assert decision.state.last_error == "run timed out"


# --- triggers ---------------------------------------------------------------------------


def trigger_schedule(operation: Operation) -> ScheduleState:
    return created_state(
        schedule({"kind": "none"}, trigger={"run_on": "host", "operation": operation})
    )


@pytest.mark.parametrize("operation", list(Operation))
def test_object_event_starts_a_one_object_trigger_run(operation: Operation) -> None:
    state = trigger_schedule(operation)
    event = object_event("host-9", operation, at=at(2), hostname="web-9")
    decision = decide_schedule(state, event, now=at(2, 1))
    (run,) = decision.runs
    assert (run.reason, run.object_id, run.operation) == (RunReason.TRIGGER, "host-9", operation)
    assert (run.occurrence, run.due_at) == (at(2), at(2, 1))
    assert run.object_attributes is not None and run.object_attributes.hostname == "web-9"
    assert decision.state is not None and decision.state.in_flight == ()
    assert run_dispatched(decision.state, run, 1, now=at(2)).ignored == "untracked_run"


def test_a_trigger_run_belongs_to_the_schedules_incarnation() -> None:
    """The run history lists the runs of the schedule's incarnation: a trigger run without
    one was recorded and never shown."""
    state = trigger_schedule(Operation.CREATED)
    event = object_event("host-9", Operation.CREATED, at=at(2))

    (run,) = decide_schedule(state, event, now=at(2, 1)).runs

    assert run.incarnation is not None and run.incarnation == state.incarnation


@pytest.mark.parametrize(
    ("event_operation", "object_type"),
    [(Operation.UPDATED, "host"), (Operation.DELETED, "host"), (Operation.CREATED, "container")],
)
def test_other_object_events_do_not_trigger(event_operation: Operation, object_type: str) -> None:
    state = trigger_schedule(Operation.CREATED)
    event = object_event("x-1", event_operation, object_type=object_type)
    assert not trigger_matches(state.schedule, event)
    decision = decide_schedule(state, event, now=T0)
    assert decision.runs == () and decision.ignored == "no_matching_trigger"
    assert decision.state == state


def test_redelivered_object_event_triggers_once() -> None:
    state = trigger_schedule(Operation.CREATED)
    event = object_event("host-9", Operation.CREATED)
    first = decide_schedule(state, event, now=T0)
    assert first.state is not None and len(first.runs) == 1
    again = decide_schedule(first.state, event, now=T0)
    assert again.runs == () and again.ignored == "duplicate_event"


def test_paused_or_disabled_schedule_ignores_triggers() -> None:
    state = trigger_schedule(Operation.CREATED)
    for change, reason in ((paused(), "paused"), (disabled(), "disabled")):
        held = decide_schedule(state, change, now=T0).state
        assert held is not None
        decision = decide_schedule(held, object_event("h", Operation.CREATED), now=T0)
        assert decision.runs == () and decision.ignored == reason


# --- lifecycle --------------------------------------------------------------------------


def test_pause_holds_occurrences_and_resume_catches_up_once() -> None:
    state, decisions = fold(hourly(), [(at(0, 30), paused())])
    assert state is not None and state.paused and state.pause_note == "change freeze"
    assert wake_at(state) is None
    assert due_runs(state, now=at(1)).ignored == "paused"
    decision = decide_schedule(state, resumed(at=at(3, 30)), now=at(3, 30))
    assert occurrences(decision.runs) == [at(3)]
    assert decision.state is not None and not decision.state.paused


def test_manual_trigger_runs_now_even_while_paused() -> None:
    state, _ = fold(hourly(), [(at(0, 30), paused())])
    assert state is not None
    decision = decide_schedule(state, triggered(at=at(0, 40)), now=at(0, 41))
    (run,) = decision.runs
    assert (run.manual, run.occurrence, run.due_at) == (True, at(0, 40), at(0, 41))
    assert decision.state is not None and decision.state.runs == 0


def test_disabled_time_is_not_caught_up_on_enable() -> None:
    state, decisions = fold(
        hourly(), [(at(0, 30), disabled(reason="noisy")), (at(5, 30), enabled())]
    )
    assert decisions[0].state is not None and decisions[0].state.disabled_reason == "noisy"
    assert state is not None and state.enabled and state.next_fire_at == at(6)
    assert due_runs(state, now=at(5, 31)).runs == ()


def test_changing_the_description_keeps_pending_catchup() -> None:
    sched = schedule(cron("0 * * * *"))
    state = created_state(sched)
    edited = sched.model_copy(update={"description": "nightly"})
    after = decide_schedule(state, upserted(edited, at=at(3)), now=at(3)).state
    assert after is not None and after.cursor == T0
    assert occurrences(due_runs(after, now=at(3)).runs) == [at(3)]


def test_changing_the_recurrence_starts_the_new_timetable_now() -> None:
    state = hourly()
    new = schedule(every(minutes=45))
    after = decide_schedule(state, upserted(new, at=at(3, 10)), now=at(3, 10)).state
    assert after is not None and after.cursor == at(3, 10)
    assert after.next_fire_at == at(3, 45)


def test_invalid_upsert_is_rejected_with_the_reason() -> None:
    bad = schedule(cron("61 * * * *"))
    created = decide_schedule(None, upserted(bad), now=T0)
    assert created.state is None and "'61 * * * *'" in (created.rejection or "")
    state = hourly()
    updated = decide_schedule(state, upserted(bad), now=T0)
    assert updated.state == state and updated.rejection is not None


def test_delete_removes_the_schedule_but_not_a_system_one() -> None:
    assert decide_schedule(hourly(), deleted(), now=T0).state is None
    system = hourly(is_system=True)
    refused = decide_schedule(system, deleted(), now=T0)
    assert refused.state == system and refused.rejection is not None


def test_events_for_an_unknown_schedule_are_ignored() -> None:
    assert decide_schedule(None, paused(), now=T0).ignored == "unknown_schedule"


def test_backfill_reruns_past_occurrences_without_counting_them() -> None:
    state = hourly()
    decision = decide_schedule(state, backfill(at(-5), at(-2)), now=T0)
    assert occurrences(decision.runs) == [at(-5)]
    assert decision.state is not None
    assert [q.occurrence for q in decision.state.queued] == [at(-4), at(-3)]
    assert all(run.backfill for run in decision.runs)
    assert all(queued.backfill for queued in decision.state.queued)
    assert decision.state.runs == 0 and decision.state.cursor == state.cursor


def test_backfill_stops_at_now_and_refuses_huge_ranges() -> None:
    state = hourly()
    clamped = decide_schedule(state, backfill(at(-2), at(10)), now=T0)
    assert occurrences(clamped.runs) == [at(-2)]
    assert clamped.state is not None
    assert [q.occurrence for q in clamped.state.queued] == [at(-1)]
    huge = decide_schedule(state, backfill(at(-(MAX_BACKFILL_RUNS + 5)), T0), now=T0)
    assert huge.runs == () and huge.rejection is not None


def test_max_runs_completes_the_schedule() -> None:
    state, run = started(hourly(max_runs=2), at(1))
    state = finish(state, run, "h1", now=at(1, 5)).state  # type: ignore[assignment]
    state, run = started(state, at(2))
    assert state.next_fire_at is None
    state = finish(state, run, "h1", now=at(2, 5)).state  # type: ignore[assignment]
    assert schedule_status(state) is ScheduleStatus.COMPLETED
    assert due_runs(state, now=at(3)).runs == ()


def test_end_at_completes_the_schedule() -> None:
    state, run = started(hourly(end_at=at(1, 30)), at(1))
    assert state.next_fire_at is None
    state = finish(state, run, "h1", now=at(1, 5)).state  # type: ignore[assignment]
    assert schedule_status(state) is ScheduleStatus.COMPLETED


def test_state_round_trips_through_json_with_its_format() -> None:
    state, _ = started(hourly(overlap=OverlapPolicy.BUFFER_ONE), at(1))
    state = due_runs(state, now=at(2)).state  # type: ignore[assignment]
    raw = state.model_dump(mode="json")
    assert raw["format"] == 1
    assert load_schedule_state(raw) == state
    with pytest.raises(ValueError, match="format 2"):
        load_schedule_state(raw | {"format": 2})


# --- properties -----------------------------------------------------------------------

steps = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=150),  # minutes to the next step
        st.sampled_from(["tick", "succeed", "fail", "empty", "trigger", "pause", "resume"]),
    ),
    min_size=1,
    max_size=25,
)


def simulate(
    overlap: OverlapPolicy, catchup: CatchupPolicy, script: list[tuple[int, str]]
) -> tuple[ScheduleState, list[RunPlan]]:
    sched = schedule(
        cron("0 * * * *"), overlap=overlap, catchup=catchup, max_runs=12, max_retries=3
    )
    state = created_state(sched, event_id=uuid.UUID(int=0))
    now = T0
    plans: list[RunPlan] = []
    for step, (minutes, action) in enumerate(script, start=1):
        now += timedelta(minutes=minutes)
        decision: Any
        if action in ("succeed", "fail", "empty") and state.in_flight:
            active = state.in_flight[0]
            run = RunPlan(
                schedule_id=state.schedule.id,
                occurrence=active.occurrence,
                due_at=now,
                attempt=active.attempt,
            )
            if action == "empty" or active.dispatched:
                decision = run_dispatched(state, run, 0, now=now)
            else:
                state = dispatch(state, run, ["h1"], now=now)
                outcome = ReleaseOutcome.COMPLETED if action == "succeed" else ReleaseOutcome.FAILED
                decision = finish(state, run, "h1", now=now, outcome=outcome)
        elif action in ("trigger", "pause", "resume"):
            builders: dict[str, Callable[..., Any]] = {
                "trigger": triggered,
                "pause": paused,
                "resume": resumed,
            }
            event = builders[action](at=now).model_copy(update={"event_id": uuid.UUID(int=step)})
            decision = decide_schedule(state, event, now=now)
        else:
            decision = due_runs(state, now=now)
        plans.extend(decision.runs)
        state = decision.state
    return state, plans


@settings(max_examples=40, deadline=None)
@given(
    overlap=st.sampled_from(list(OverlapPolicy)),
    catchup=st.sampled_from(list(CatchupPolicy)),
    script=steps,
)
def test_replaying_the_same_inputs_reproduces_state_and_runs(
    overlap: OverlapPolicy, catchup: CatchupPolicy, script: list[tuple[int, str]]
) -> None:
    first = simulate(overlap, catchup, script)
    second = simulate(overlap, catchup, script)
    assert first == second


@settings(max_examples=60, deadline=None)
@given(
    overlap=st.sampled_from(list(OverlapPolicy)),
    catchup=st.sampled_from(list(CatchupPolicy)),
    script=steps,
)
def test_each_occurrence_starts_once_and_max_runs_holds(
    overlap: OverlapPolicy, catchup: CatchupPolicy, script: list[tuple[int, str]]
) -> None:
    state, plans = simulate(overlap, catchup, script)
    first_attempts = [p.occurrence for p in plans if p.attempt == 1 and not p.manual]
    assert len(first_attempts) == len(set(first_attempts))
    assert first_attempts == sorted(first_attempts)
    waiting = [q.occurrence for q in state.queued if not q.backfill]
    assert state.runs == len(first_attempts) + len(waiting) <= 12
    assert not set(waiting) & set(first_attempts)
    keys = [(r.occurrence, r.attempt) for r in state.in_flight]
    assert len(keys) == len(set(keys))
    if overlap is not OverlapPolicy.ALLOW:
        assert len(state.in_flight) <= 1
