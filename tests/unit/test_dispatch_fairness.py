"""The dispatch queue shares equal ranks between organizations, caps each organization's
commands in flight, and issues hosts about to break their promise first, earliest first."""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.base import CommandReason, ComplianceState
from schemas.internal import DispatchRequested, ReleaseOutcome
from streams.policy import dispatch
from streams.policy.dispatch import DispatchQueue
from tests.unit.factories import NOW

TIMEOUT = timedelta(seconds=600)
MINUTE = timedelta(minutes=1)
GUARD = 120


def req(
    command: str,
    organization: str | None,
    *,
    priority: int = 5,
    due_at: datetime = NOW,
    promise_at: datetime | None = None,
    reason: CommandReason = CommandReason.SCHEDULED,
) -> DispatchRequested:
    return DispatchRequested(
        command_id=command,
        host_id=f"host-of-{command}",
        priority=priority,
        due_at=due_at,
        reason=reason,
        state=ComplianceState.PARTIAL,
        attempt=1,
        organization=organization,
        promise_at=promise_at,
    )


def issue(queue: DispatchQueue, *, cap: int = 100, now: datetime = NOW, **kwargs: int) -> list[str]:
    issued = queue.issue(now=now, cap=cap, timeout=TIMEOUT, **kwargs)
    return [item.command.command_id for item in issued]


def org_of(command: str) -> str:
    return command.split("-")[0]


# --- round-robin between organizations ----------------------------------------------


def test_equal_priorities_are_issued_in_turn_across_organizations() -> None:
    queue = DispatchQueue()
    for number in range(50):
        queue.request(
            req(f"big-{number}", "big", due_at=NOW - timedelta(hours=5) + number * MINUTE)
        )
    for number in range(3):
        queue.request(req(f"small-{number}", "small", due_at=NOW))

    issued = issue(queue, cap=8)

    assert [org_of(command) for command in issued] == ["big", "small"] * 3 + ["big", "big"]
    assert issued[0::2][:4] == ["big-0", "big-1", "big-2", "big-3"]  # Earliest due first.


def test_a_small_organization_is_not_starved_by_a_huge_backlog() -> None:
    queue = DispatchQueue()
    for number in range(5_000):
        queue.request(req(f"big-{number}", "big", due_at=NOW - timedelta(days=1)))
    for number in range(50):
        queue.request(req(f"small-{number}", "small", due_at=NOW))

    issued = issue(queue, cap=100)

    assert Counter(org_of(command) for command in issued) == {"big": 50, "small": 50}


def test_higher_priority_still_comes_before_the_turn() -> None:
    queue = DispatchQueue()
    queue.request(req("a-low", "a", priority=3))
    queue.request(req("b-high", "b", priority=9))
    queue.request(req("a-high", "a", priority=9, due_at=NOW + MINUTE))

    assert issue(queue) == ["b-high", "a-high", "a-low"]  # b joined the turn at 9 first.


def test_commands_without_an_organization_share_one_turn() -> None:
    queue = DispatchQueue()
    for number in range(4):
        queue.request(req(f"none{number}-x", None))
        queue.request(req(f"a-{number}", "a"))

    issued = issue(queue, cap=4)

    assert [command.startswith("a-") for command in issued] == [False, True, False, True]


# --- the per-organization cap ---------------------------------------------------------


def test_an_organization_at_its_cap_waits_while_others_go() -> None:
    queue = DispatchQueue()
    for number in range(10):
        queue.request(req(f"big-{number}", "big", priority=9))
    for number in range(10):
        queue.request(req(f"small-{number}", "small", priority=3))

    issued = issue(queue, cap=8, org_cap=3)

    assert Counter(org_of(command) for command in issued) == {"big": 3, "small": 3}
    assert queue.in_flight_for("big") == 3
    assert issue(queue, cap=8, org_cap=3) == []

    queue.release(issued[0], ReleaseOutcome.COMPLETED)
    assert issue(queue, cap=8, org_cap=3) == ["big-3"]


def test_commands_without_an_organization_have_no_organization_cap() -> None:
    queue = DispatchQueue()
    for number in range(5):
        queue.request(req(f"x{number}", None))

    assert len(issue(queue, cap=10, org_cap=1)) == 5
    assert queue.in_flight_for(None) == 5


def test_no_org_cap_is_todays_behaviour() -> None:
    queue = DispatchQueue()
    for number in range(5):
        queue.request(req(f"big-{number}", "big"))

    assert len(issue(queue, cap=10, org_cap=0)) == 5


def test_a_timed_out_command_frees_its_organizations_slot() -> None:
    queue = DispatchQueue()
    queue.request(req("a-1", "a"))
    queue.request(req("a-2", "a"))
    assert issue(queue, org_cap=1) == ["a-1"]

    queue.expire(NOW + TIMEOUT)

    assert queue.in_flight_for("a") == 0
    assert issue(queue, org_cap=1, now=NOW + TIMEOUT) == ["a-2"]


def test_a_rebuilt_queue_counts_each_organizations_commands_in_flight() -> None:
    queue = DispatchQueue()
    queue.restore_in_flight(req("a-1", "a"), NOW + TIMEOUT)
    queue.restore_in_flight(req("a-2", "a"), NOW + TIMEOUT)
    queue.request(req("a-3", "a"))
    queue.request(req("b-1", "b"))

    assert queue.in_flight_for("a") == 2
    assert issue(queue, org_cap=2) == ["b-1"]


# --- the promise guard --------------------------------------------------------------------


def test_commands_near_their_promise_go_first_earliest_promise_first() -> None:
    queue = DispatchQueue()
    queue.request(req("a-critical", "a", priority=9))
    queue.request(req("a-late", "a", priority=3, promise_at=NOW + timedelta(minutes=90)))
    queue.request(req("b-later", "b", priority=1, promise_at=NOW + timedelta(minutes=100)))
    queue.request(req("b-latest", "b", priority=4, promise_at=NOW + timedelta(minutes=119)))
    queue.request(req("b-far", "b", priority=4, promise_at=NOW + timedelta(minutes=121)))
    queue.request(req("b-broken", "b", priority=2, promise_at=NOW - timedelta(hours=3)))
    queue.request(req("c-force", "c", priority=10, reason=CommandReason.FORCE))

    issued = issue(queue, promise_guard_minutes=GUARD)

    assert issued == [
        "c-force",
        "b-broken",
        "a-late",
        "b-later",
        "b-latest",
        "a-critical",
        "b-far",
    ]


def test_without_the_guard_the_promise_does_not_change_the_order() -> None:
    queue = DispatchQueue()
    queue.request(req("a-critical", "a", priority=9))
    queue.request(req("a-late", "a", priority=3, promise_at=NOW - timedelta(hours=1)))

    assert issue(queue) == ["a-critical", "a-late"]


def test_a_guarded_command_of_an_organization_at_its_cap_lets_the_next_go() -> None:
    queue = DispatchQueue()
    queue.restore_in_flight(req("a-0", "a"), NOW + TIMEOUT)
    queue.request(req("a-1", "a", priority=3, promise_at=NOW))
    queue.request(req("b-1", "b", priority=3, promise_at=NOW + MINUTE))
    queue.request(req("b-2", "b", priority=9))

    assert issue(queue, org_cap=1, promise_guard_minutes=GUARD) == ["b-1"]
    queue.release("a-0", ReleaseOutcome.COMPLETED)
    assert issue(queue, org_cap=1, promise_guard_minutes=GUARD) == ["a-1"]


# --- properties ---------------------------------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("request"),
            st.integers(0, 40),  # command number
            st.integers(0, 3),  # organization; 0: none
            st.integers(1, 10),  # priority
            st.integers(-300, 60),  # due, minutes from the start
            st.one_of(st.none(), st.integers(-60, 600)),  # promise, minutes from the start
        ),
        st.tuples(st.just("release"), st.integers(0, 40)),
        st.tuples(st.just("advance"), st.integers(1, 30)),
        st.tuples(st.just("issue")),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(
    ops=operations,
    cap=st.integers(1, 6),
    org_cap=st.one_of(st.none(), st.integers(1, 3)),
    guard=st.sampled_from([0, 30, GUARD]),
)
def test_caps_hold_and_guarded_commands_go_first_in_promise_order(
    ops: list[tuple[object, ...]], cap: int, org_cap: int | None, guard: int
) -> None:
    slack = dispatch.PROMISE_HEAPS_SLACK
    dispatch.PROMISE_HEAPS_SLACK = 0  # Rebuild the promise heaps as often as allowed.
    try:
        _caps_hold_and_guarded_commands_go_first(ops, cap, org_cap, guard)
    finally:
        dispatch.PROMISE_HEAPS_SLACK = slack


def _caps_hold_and_guarded_commands_go_first(
    ops: list[tuple[object, ...]], cap: int, org_cap: int | None, guard: int
) -> None:
    queue = DispatchQueue()
    waiting: dict[str, DispatchRequested] = {}
    in_flight: dict[str, DispatchRequested] = {}
    gone: set[str] = set()
    ever_issued: list[str] = []
    now = NOW

    def full(request: DispatchRequested) -> bool:
        organization = request.organization
        if org_cap is None or organization is None:
            return False
        return sum(r.organization == organization for r in in_flight.values()) >= org_cap

    for op in ops:
        if op[0] == "request":
            _, number, org, priority, due, promise = op
            assert isinstance(number, int) and isinstance(org, int)
            assert isinstance(priority, int) and isinstance(due, int)
            command = f"cmd{number}"
            request = req(
                command,
                f"org{org}" if org else None,
                priority=priority,
                due_at=NOW + due * MINUTE,
                promise_at=None if promise is None else NOW + int(str(promise)) * MINUTE,
            )
            current = waiting.get(command)
            fresh = (
                command not in in_flight
                and command not in gone
                and (current is None or current.priority < priority)
            )
            assert queue.request(request) is fresh
            if fresh:
                waiting[command] = request
        elif op[0] == "release":
            command = f"cmd{op[1]}"
            queue.release(command, ReleaseOutcome.COMPLETED)
            waiting.pop(command, None)
            in_flight.pop(command, None)
            gone.add(command)
        elif op[0] == "advance":
            assert isinstance(op[1], int)
            now += op[1] * MINUTE
            for request in queue.expire(now):
                del in_flight[request.command_id]
                gone.add(request.command_id)
        else:
            issued = queue.issue(
                now=now, cap=cap, timeout=TIMEOUT, org_cap=org_cap, promise_guard_minutes=guard
            )
            horizon = now + guard * MINUTE

            def guarded(request: DispatchRequested, horizon: datetime = horizon) -> bool:
                return (
                    guard > 0
                    and request.priority < 10
                    and request.promise_at is not None
                    and request.promise_at <= horizon
                )

            tiers = []
            for item in issued:
                command = item.command.command_id
                request = waiting.pop(command)
                assert not full(request)
                in_flight[command] = request
                ever_issued.append(command)
                top = guard > 0 and request.priority >= 10
                tiers.append(0 if top else 1 if guarded(request) else 2)
            assert tiers == sorted(tiers)
            promises = [
                waiting_or_flying.promise_at
                for item in issued
                if guarded(waiting_or_flying := in_flight[item.command.command_id])
            ]
            assert promises == sorted(promises)  # type: ignore[type-var]
            # As many as the caps allow: afterwards, every command left waits for a reason.
            left = [r for r in waiting.values() if not full(r)]
            assert len(in_flight) == cap or not left
            # Nothing guarded that could go was left behind an ordinary one.
            if 2 in tiers:
                assert not any(guarded(r) for r in left)

        assert queue.in_flight_count <= cap
        assert queue.in_flight_ids() == set(in_flight)
        assert queue.waiting_count == len(waiting)
        if org_cap is not None:
            per_org = Counter(r.organization for r in in_flight.values() if r.organization)
            assert all(count <= org_cap for count in per_org.values())
            for organization, count in per_org.items():
                assert queue.in_flight_for(organization) == count

    assert len(ever_issued) == len(set(ever_issued))


@settings(max_examples=200, deadline=None)
@given(
    backlogs=st.lists(st.integers(1, 120), min_size=1, max_size=12),
    cap=st.integers(1, 7),
)
def test_no_organization_waits_more_than_one_turn_of_the_others(
    backlogs: list[int], cap: int
) -> None:
    """Every organization with commands waiting is served at least once in every run of as
    many issues as there are organizations waiting, whatever their backlogs."""
    queue = DispatchQueue()
    for org, size in enumerate(backlogs):
        for number in range(size):
            queue.request(req(f"o{org}-{number}", f"o{org}", due_at=NOW - number * MINUTE))
    order: list[str] = []
    rounds = 0
    while queue.waiting_count:
        issued = issue(queue, cap=cap)
        order.extend(issued)
        for command in issued:
            queue.release(command, ReleaseOutcome.COMPLETED)
        rounds += 1
        if rounds == math.ceil(len(backlogs) / cap):
            # Bounded wait in issue rounds: every organization has had one by now.
            assert {org_of(c) for c in order} == {f"o{org}" for org in range(len(backlogs))}
    remaining = Counter({f"o{org}": size for org, size in enumerate(backlogs)})
    for start in range(len(order)):
        backlogged = {org for org, count in remaining.items() if count}
        window = {org_of(c) for c in order[start : start + len(backlogged)]}
        assert window == backlogged
        remaining[org_of(order[start])] -= 1


def test_promise_entries_left_by_issued_commands_are_dropped() -> None:
    queue = DispatchQueue()
    for number in range(3 * dispatch.PROMISE_HEAPS_SLACK):
        queue.request(req(f"a-{number}", "a", promise_at=NOW + timedelta(days=2)))
        issue(queue, cap=5)
        for command in list(queue.in_flight_ids()):
            queue.release(command, ReleaseOutcome.COMPLETED)

    entries = sum(len(heap) for heap in queue._promises.heaps.values())
    assert entries <= 2 * queue.waiting_count + dispatch.PROMISE_HEAPS_SLACK + 1
