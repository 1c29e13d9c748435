"""Run outcomes, backfilled command ids, dropped occurrences and per-request overlap (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from schemas.internal import ReleaseOutcome
from schemas.schedules import (
    ActiveRun,
    OverlapPolicy,
    RunOutcome,
    ScheduleBackfillRequested,
    ScheduleDeleted,
    ScheduleState,
    ScheduleTriggered,
)
from streams.policy.schedule_commands import CommandEntry, counted_once, fan_out_choice
from streams.policy.schedules import decide_schedule, due_runs, run_outcome
from streams.policy.targets import dispatch_requests
from tests.unit.schedule_factories import (
    MINUTE,
    T0,
    backfill,
    created_state,
    cron,
    deleted,
    dispatch,
    finish,
    schedule,
    tick,
    triggered,
)


def at(hour: int, minute: int = 0) -> datetime:
    return T0 + timedelta(hours=hour, minutes=minute)


def hourly(**fields: Any) -> ScheduleState:
    return created_state(schedule(cron("0 * * * *"), **fields))


def fleet_run(state: ScheduleState, hosts: int, failures: int, **fields: Any) -> Any:
    """The decision that ends a run over `hosts` hosts of which `failures` failed."""
    decision = tick(state, at(1))
    assert decision.state is not None
    run = decision.runs[0]
    current = dispatch(decision.state, run, [f"h{n}" for n in range(hosts)], now=at(1))
    last = None
    for number in range(hosts):
        outcome = ReleaseOutcome.FAILED if number < failures else ReleaseOutcome.COMPLETED
        last = finish(current, run, f"h{number}", now=at(1, 5), outcome=outcome, error="boom")
        assert last.state is not None
        current = last.state
    return last


# --- run outcomes follow the commands ------------------------------------------------


def test_one_failed_host_of_a_fleet_run_is_a_partial_failure_without_backoff() -> None:
    decision = fleet_run(hourly(max_retries=0), hosts=10, failures=1)
    state = decision.state
    assert state.enabled and state.retry is None and state.consecutive_failures == 0
    assert state.partially_failed_runs == 1 and state.failed_runs == 0
    assert decision.events == ()
    (concluded,) = decision.concluded
    assert concluded.outcome is RunOutcome.PARTIALLY_FAILED
    assert (concluded.commands, concluded.failed) == (10, 1)


def test_failures_past_the_threshold_fail_the_run_and_self_disable() -> None:
    decision = fleet_run(hourly(max_retries=0, failure_threshold=0.2), hosts=10, failures=3)
    state = decision.state
    assert not state.enabled and state.failed_runs == 1
    assert decision.concluded[0].outcome is RunOutcome.FAILED
    assert len(decision.events) == 1


def test_a_clean_run_is_counted_as_succeeded() -> None:
    decision = fleet_run(hourly(), hosts=3, failures=0)
    assert decision.state.succeeded_runs == 1
    assert decision.concluded[0].outcome is RunOutcome.SUCCEEDED


@given(
    finished=st.integers(min_value=1, max_value=500),
    data=st.data(),
    threshold=st.floats(min_value=0, max_value=1),
)
def test_run_outcome_fails_exactly_past_the_threshold_or_when_all_failed(
    finished: int, data: st.DataObject, threshold: float
) -> None:
    failed = data.draw(st.integers(min_value=0, max_value=finished))
    active = ActiveRun(occurrence=T0, started_at=T0, finished=finished, failed=failed)
    outcome = run_outcome(active, threshold)
    if failed == 0:
        assert outcome is RunOutcome.SUCCEEDED
    elif failed == finished or failed / finished > threshold:
        assert outcome is RunOutcome.FAILED
    else:
        assert outcome is RunOutcome.PARTIALLY_FAILED


# --- a backfill never stops its schedule ----------------------------------------------


def test_a_backfilled_occurrence_that_ran_gets_command_ids_of_its_own() -> None:
    state = hourly()
    first = tick(state, at(1))
    assert first.state is not None
    (regular,) = first.runs
    ran = dispatch(first.state, regular, ["h1"], now=at(1))
    done = finish(ran, regular, "h1", now=at(1, 1)).state
    assert done is not None
    refill = decide_schedule(done, backfill(at(0, 30), at(1, 2), at=at(1, 2)), now=at(1, 2))
    (rerun,) = refill.runs
    assert rerun.occurrence == regular.occurrence and rerun.backfill_id is not None
    sched = done.schedule
    (before,) = dispatch_requests(sched, regular, ["h1"])
    (again,) = dispatch_requests(sched, rerun, ["h1"])
    assert before.command_id != again.command_id
    # A second backfill over the same range is yet another run with ids of its own.
    assert refill.state is not None
    rerun_done = finish(dispatch(refill.state, rerun, ["h1"], now=at(1, 2)), rerun, "h1",
                        now=at(1, 3)).state  # fmt: skip
    assert rerun_done is not None
    twice = decide_schedule(rerun_done, backfill(at(0, 30), at(1, 4), at=at(1, 4)), now=at(1, 4))
    (third,) = dispatch_requests(sched, twice.runs[0], ["h1"])
    assert third.command_id not in {before.command_id, again.command_id}


def test_a_backfill_run_that_fails_retries_with_the_backfill_ids() -> None:
    state = hourly(failure_threshold=0)
    refill = decide_schedule(state, backfill(at(-2), at(-1), at=T0), now=T0)
    assert refill.state is not None
    (run,) = refill.runs
    sent = dispatch(refill.state, run, ["h1"], now=T0)
    failed = finish(sent, run, "h1", now=T0 + MINUTE, outcome=ReleaseOutcome.FAILED).state
    assert failed is not None and failed.retry is not None
    assert failed.retry.backfill_id == run.backfill_id
    retried = due_runs(failed, now=failed.retry.due_at)
    assert [r.backfill_id for r in retried.runs] == [run.backfill_id]


def test_a_stale_busy_marker_does_not_keep_the_host_busy() -> None:
    ended = CommandEntry(
        schedule_id="s", occurrence=T0, attempt=1, host_id="h1", scanner="nmap",
        ended=ReleaseOutcome.COMPLETED,
    )  # fmt: skip
    live = ended.model_copy(update={"ended": None})
    assert fan_out_choice(None, "other", busy_entry=None).value == "send"
    assert fan_out_choice(None, "other", busy_entry=ended).value == "send"
    assert fan_out_choice(None, "other", busy_entry=live).value == "busy"


# --- end reports counted once per command --------------------------------------------


def test_an_end_report_is_counted_once_per_command() -> None:
    fresh, recent = counted_once((), "c1")
    assert fresh and recent == ("c1",)
    again, unchanged = counted_once(recent, "c1")
    assert not again and unchanged == recent
    many: tuple[str, ...] = ()
    for number in range(100):
        _, many = counted_once(many, f"c{number}")
    assert len(many) <= 16 and "c99" in many


# --- every occurrence leaves a trace ---------------------------------------------------


def test_dropped_occurrences_are_counted_by_reason() -> None:
    state = hourly()
    first = tick(state, at(1))
    assert first.state is not None
    blocked = tick(dispatch(first.state, first.runs[0], ["h1"], now=at(1)), at(2))
    assert blocked.state is not None
    assert [d.reason for d in blocked.dropped] == ["overlap"]
    assert blocked.state.dropped_occurrences == {"overlap": 1}
    late = tick(blocked.state, at(5))
    assert late.state is not None
    assert late.state.dropped_occurrences["overlap"] >= 1
    assert sum(late.state.dropped_occurrences.values()) == 1 + len(late.dropped)


# --- system schedules -------------------------------------------------------------------


def test_a_system_schedule_is_deleted_only_by_a_system_delete() -> None:
    state = hourly(is_system=True)
    refused = decide_schedule(state, deleted(at=at(1)), now=at(1))
    assert refused.rejection is not None
    plain = deleted(at=at(1))
    allowed = ScheduleDeleted(**{**plain.model_dump(), "system": True})
    done = decide_schedule(state, allowed, now=at(1))
    assert done.state is None and done.changed


# --- overlap policy per request ----------------------------------------------------------


def test_trigger_takes_its_own_overlap_policy() -> None:
    state = hourly()  # overlap skip
    first = tick(state, at(1))
    assert first.state is not None
    busy = dispatch(first.state, first.runs[0], ["h1"], now=at(1))
    skipped = decide_schedule(busy, triggered(at=at(1, 10)), now=at(1, 10))
    assert skipped.ignored == "overlap" and skipped.runs == ()
    plain = triggered(at=at(1, 11))
    allow = ScheduleTriggered(**{**plain.model_dump(), "overlap": OverlapPolicy.ALLOW})
    allowed = decide_schedule(busy, allow, now=at(1, 11))
    assert [r.manual for r in allowed.runs] == [True]
    buffer = ScheduleTriggered(**{**plain.model_dump(), "overlap": OverlapPolicy.BUFFER_ONE})
    buffered = decide_schedule(busy, buffer, now=at(1, 11))
    assert buffered.state is not None and buffered.state.buffered is not None


def test_backfill_takes_its_own_overlap_policy() -> None:
    state = hourly()
    first = tick(state, at(1))
    assert first.state is not None
    busy = dispatch(first.state, first.runs[0], ["h1"], now=at(1))
    plain = backfill(at(-3), at(0, 30), at=at(1, 10))

    def with_overlap(policy: OverlapPolicy | None) -> ScheduleState:
        event = ScheduleBackfillRequested(**{**plain.model_dump(), "overlap": policy})
        decision = decide_schedule(busy, event, now=at(1, 10))
        assert decision.state is not None
        return decision.state

    assert [q.occurrence for q in with_overlap(None).queued] == [at(-3), at(-2), at(-1), at(0)]
    assert with_overlap(OverlapPolicy.SKIP).queued == ()
    assert with_overlap(OverlapPolicy.SKIP).dropped_occurrences == {"overlap": 4}
    assert [q.occurrence for q in with_overlap(OverlapPolicy.BUFFER_ONE).queued] == [at(0)]
