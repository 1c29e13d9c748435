"""The worker's side of the contract, walked end to end with the pure functions only.

`Worker` below does with each input what the schedule stage (`streams.stages.schedules`) does
inside the host stage's batch, with the pure functions alone: read the table -> call the policy
-> write the table -> queue the dispatch requests.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from schemas.internal import DispatchRequested, ReleaseOutcome
from schemas.objects import Operation
from schemas.schedules import RunPlan, Schedule, ScheduleState
from schemas.state import HostSchedule
from streams.policy.schedules import (
    ScheduleDecision,
    decide_schedule,
    due_runs,
    run_dispatched,
    run_finished,
    trigger_matches,
    wake_at,
)
from streams.policy.targets import dispatch_requests, select_targets
from tests.unit.schedule_factories import (
    MINUTE,
    T0,
    cron,
    host,
    object_event,
    schedule,
    upserted,
)


class Worker:
    """A stand-in for the schedule stage: one schedule table, a host view, an outbox."""

    def __init__(self, hosts: list[HostSchedule]) -> None:
        self.table: dict[str, ScheduleState] = {}
        self.hosts = hosts
        self.last_scan: dict[str, datetime] = {}
        self.sent: list[DispatchRequested] = []

    def apply(self, schedule_id: str, decision: ScheduleDecision, *, now: datetime) -> None:
        state = decision.state
        for run in decision.runs:
            assert state is not None
            state = self.start(state, run, now=now)
        if state is None:
            self.table.pop(schedule_id, None)
        else:
            self.table[schedule_id] = state

    def start(self, state: ScheduleState, run: RunPlan, *, now: datetime) -> ScheduleState:
        sched: Schedule = state.schedule
        chosen, _skipped = select_targets(
            sched, run, self.hosts, now=now, last_scan_by_scanner=self.last_scan
        )
        requests = dispatch_requests(sched, run, chosen)
        self.sent.extend(requests)
        if not run.tracked:
            return state
        after = run_dispatched(state, run, len(requests), now=now)
        assert after.state is not None
        # A run with no targets concludes at once and may release a buffered run or retry.
        for released in after.runs:
            return self.start(after.state, released, now=now)
        return after.state


def test_schedule_life_through_the_worker_contract() -> None:
    worker = Worker([host("h1", labels={"env": "prod"}), host("h2", labels={"env": "dev"})])
    sched = schedule(
        cron("0 * * * *"),
        targets={"filter": {"field": "labels.env", "op": "eq", "value": "prod"}},
        trigger={"run_on": "host", "operation": "created"},
    )
    worker.apply(sched.id, decide_schedule(None, upserted(sched), now=T0), now=T0)
    state = worker.table[sched.id]
    wake = wake_at(state)
    assert wake == T0 + timedelta(hours=1)

    worker.apply(sched.id, due_runs(state, now=wake), now=wake)
    (first,) = worker.sent
    assert (first.host_id, first.schedule_id, first.attempt) == ("h1", sched.id, 1)

    failed_at = wake + 5 * MINUTE
    result = run_finished(
        worker.table[sched.id],
        wake,  # The run's occurrence, which the worker keeps beside each command id.
        first.attempt,
        outcome=ReleaseOutcome.FAILED,
        host_id="h1",
        error="timeout talking to agent",
        now=failed_at,
    )
    worker.apply(sched.id, result, now=failed_at)
    retry_at = wake_at(worker.table[sched.id])
    assert retry_at == failed_at + 2 * MINUTE

    worker.apply(sched.id, due_runs(worker.table[sched.id], now=retry_at), now=retry_at)
    retried = worker.sent[-1]
    assert (retried.host_id, retried.attempt) == ("h1", 2)
    assert retried.command_id != first.command_id

    event = object_event("h3", Operation.CREATED, at=retry_at, labels={"env": "prod"})
    assert trigger_matches(worker.table[sched.id].schedule, event)
    worker.apply(
        sched.id, decide_schedule(worker.table[sched.id], event, now=retry_at), now=retry_at
    )
    triggered = worker.sent[-1]
    assert (triggered.host_id, triggered.reason.value) == ("h3", "trigger")
    assert len(worker.sent) == 3
