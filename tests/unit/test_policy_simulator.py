"""The policy simulator on a tiny fleet: the real host policy and dispatch queue over days of
virtual time, the new ranks against today's."""

from __future__ import annotations

from bench.scenarios.policy import (
    RunResult,
    build_fleet,
    jain,
    policies,
    simulate,
    smaller_first_wait,
)
from schemas.config import SchedulerConfig

CONFIG = SchedulerConfig()
HOSTS, DAYS, SEED = 400, 3.0, 3


def run(capacity: float) -> dict[str, RunResult]:
    fleet = build_fleet(HOSTS, SEED, CONFIG, DAYS)
    return {
        policy.name: simulate(
            fleet, policy=policy, capacity=capacity, days=DAYS, seed=SEED, config=CONFIG
        )
        for policy in policies(CONFIG)
    }


def test_at_full_capacity_the_new_ranks_miss_no_more_promises_and_share_no_worse() -> None:
    runs = run(1.0)
    today, new = runs["today"], runs["fair+guard"]

    assert new.hosts_past_promise <= today.hosts_past_promise
    # The turn moves who waits during a burst, not the long-run shares: over three days the
    # two indexes differ in the fifth decimal (0.968401 against 0.968410 here), either way
    # from one seed to the next. What the turn changes is checked next.
    assert new.jain >= today.jain - 1e-3
    # The largest organization onboards 80 hosts at once; the others' new hosts go in turn.
    assert smaller_first_wait(new) < smaller_first_wait(today)
    assert new.issued > 0


def test_below_capacity_the_promise_guard_keeps_promises_today_breaks() -> None:
    runs = run(0.6)
    today, new = runs["today"], runs["fair+guard"]

    assert today.hosts_past_promise > 0
    assert new.hosts_past_promise < today.hosts_past_promise


def test_the_same_seed_gives_the_same_run() -> None:
    fleet = build_fleet(60, 7, CONFIG, 0.5)
    policy = policies(CONFIG)[1]
    first = simulate(fleet, policy=policy, capacity=0.8, days=0.5, seed=7, config=CONFIG)
    again = simulate(fleet, policy=policy, capacity=0.8, days=0.5, seed=7, config=CONFIG)

    assert first.issued > 0
    # Compared as text: a state no host was in has NaN figures, and NaN != NaN.
    assert str((first.issued, first.intervals, first.waits, first.organizations)) == str(
        (again.issued, again.intervals, again.waits, again.organizations)
    )


def test_jain_index_is_one_when_equal_and_one_over_n_when_one_takes_all() -> None:
    assert jain([0.5, 0.5, 0.5]) == 1.0
    assert jain([1.0, 0.0, 0.0, 0.0]) == 0.25
