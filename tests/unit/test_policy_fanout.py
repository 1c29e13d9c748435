"""A fanned-out run's tally (streams.policy.fanout), without Kafka."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from schemas.internal import ReleaseOutcome, ScheduleCommandEnded, ScheduleFanOutDone
from schemas.schedules import RunPlan
from streams.policy.fanout import (
    PendingFanOuts,
    answered,
    fanned_out,
    held,
    run_key,
    unanswered,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RUN = RunPlan(schedule_id="nightly", occurrence=T0, due_at=T0)
NEXT = RunPlan(schedule_id="nightly", occurrence=T0 + timedelta(hours=1), due_at=T0)


def done(
    partition: int, issued: int, skipped: int = 0, run: RunPlan = RUN, **skipped_hosts: int
) -> ScheduleFanOutDone:
    return ScheduleFanOutDone(
        schedule_id="nightly",
        run=run,
        partition=partition,
        issued=issued,
        skipped=skipped,
        skipped_hosts=skipped_hosts,
    )


def ended(host_id: str, run: RunPlan = RUN) -> ScheduleCommandEnded:
    return ScheduleCommandEnded(
        schedule_id="nightly",
        occurrence=run.occurrence,
        attempt=run.attempt,
        command_id=f"cmd-{host_id}",
        host_id=host_id,
        outcome=ReleaseOutcome.COMPLETED,
    )


def test_the_last_answer_dispatches_the_run_with_every_partition_counted() -> None:
    pending = fanned_out(PendingFanOuts(), RUN, expected=3)
    first = answered(pending, done(0, issued=2, skipped=1, busy=1))
    assert first.dispatched is None and not first.duplicate
    second = answered(first.pending, done(2, issued=0, skipped=2, busy=1, maintenance=1))
    assert second.dispatched is None
    last = answered(second.pending, done(1, issued=5))
    tally = last.dispatched
    assert tally is not None and tally.run == RUN
    assert (tally.issued, tally.skipped, sorted(tally.parts)) == (7, 3, [0, 1, 2])
    assert tally.skipped_hosts == {"busy": 2, "maintenance": 1}
    assert last.pending.runs == {}


def test_a_replayed_answer_or_one_for_an_unknown_run_counts_nothing() -> None:
    pending = answered(fanned_out(PendingFanOuts(), RUN, expected=2), done(0, issued=4)).pending
    again = answered(pending, done(0, issued=4))
    assert again.duplicate and again.pending == pending and again.dispatched is None
    stranger = answered(pending, done(1, issued=1, run=NEXT))
    assert stranger.duplicate and stranger.pending == pending
    last = answered(pending, done(1, issued=1))
    assert last.dispatched is not None and last.dispatched.issued == 5


def test_ends_that_overtake_their_run_wait_for_its_last_answer() -> None:
    pending = fanned_out(fanned_out(PendingFanOuts(), RUN, expected=1), NEXT, expected=1)
    pending = held(held(held(pending, ended("a")), ended("b", run=NEXT)), ended("c"))
    first = answered(pending, done(0, issued=2))
    assert [e.host_id for e in first.ends] == ["a", "c"]
    assert [e.host_id for e in first.pending.early] == ["b"]
    assert list(first.pending.runs) == [run_key(NEXT)]
    second = answered(first.pending, done(0, issued=1, run=NEXT))
    assert [e.host_id for e in second.ends] == ["b"]
    assert second.pending == PendingFanOuts()


def test_the_stored_shape_round_trips_and_older_records_still_load() -> None:
    pending = held(
        answered(fanned_out(PendingFanOuts(), RUN, 2), done(1, 3, busy=1)).pending, ended("a")
    )
    stored = pending.model_dump_json(exclude_none=True).encode()
    assert PendingFanOuts.model_validate_json(stored) == pending
    # Written before the tally was typed: lists, and no skip counts yet.
    older = {
        "runs": {
            run_key(RUN): {
                "run": RUN.model_dump(mode="json"),
                "expected": 2,
                "parts": [0],
                "issued": 3,
            }
        },
        "early": [ended("a").model_dump(mode="json")],
    }
    loaded = PendingFanOuts.model_validate_json(json.dumps(older))
    assert loaded.runs[run_key(RUN)].skipped == 0 and loaded.early == (ended("a"),)
    assert answered(loaded, done(1, 2)).dispatched is not None


def test_runs_a_partition_has_not_answered_are_the_ones_to_fan_out_again() -> None:
    pending = fanned_out(fanned_out(PendingFanOuts(), RUN, 3), NEXT, 1)
    pending = answered(pending, done(0, issued=1)).pending

    [waiting_run, waiting_next] = unanswered(pending)

    assert (waiting_run.run, waiting_run.parts) == (RUN, (0,))
    assert (waiting_next.run, waiting_next.parts) == (NEXT, ())
    pending = answered(pending, done(0, issued=1, run=NEXT)).pending
    assert [tally.run for tally in unanswered(pending)] == [RUN]
    for partition in (1, 2):
        pending = answered(pending, done(partition, issued=0)).pending
    assert unanswered(pending) == ()
