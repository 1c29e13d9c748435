"""One pool per registered scanner under the fleet-wide ceiling: pools fill independently, an
inactive scanner's commands are held (never dropped), a scanner the registry does not name
shares the ceiling only, and a command's deadline is its scanner's timeout."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.internal import DispatchRequested, ReleaseOutcome
from streams.policy.dispatch import DispatchQueue
from tests.unit.factories import NOW, dispatch_request

TIMEOUT = timedelta(minutes=10)


def _request(command_id: str, scanner: str, priority: int = 5) -> DispatchRequested:
    return dispatch_request(command_id, priority=priority).model_copy(update={"scanner": scanner})


def _queue(*requests: DispatchRequested) -> DispatchQueue:
    queue = DispatchQueue()
    for request in requests:
        assert queue.request(request)
    return queue


def test_two_pools_fill_independently_under_the_ceiling() -> None:
    queue = _queue(
        *(_request(f"c{i}", "compliance", priority=9) for i in range(4)),
        *(_request(f"p{i}", "portscan", priority=3) for i in range(4)),
    )

    issued = queue.issue(now=NOW, cap=10, timeout=TIMEOUT, pools={"compliance": 2, "portscan": 1})

    by_scanner = sorted(item.command.scanner for item in issued)
    assert by_scanner == ["compliance", "compliance", "portscan"]
    # The full compliance pool does not stop a lower-ranked portscan command, nor the reverse.
    queue.release(issued[0].request.command_id, ReleaseOutcome.COMPLETED)
    again = queue.issue(now=NOW, cap=10, timeout=TIMEOUT, pools={"compliance": 2, "portscan": 1})
    assert [item.command.scanner for item in again] == [issued[0].command.scanner]


def test_the_ceiling_holds_over_all_pools() -> None:
    queue = _queue(*(_request(f"{s}{i}", s) for s in ("a", "b") for i in range(5)))

    issued = queue.issue(now=NOW, cap=3, timeout=TIMEOUT, pools={"a": 5, "b": 5})

    assert len(issued) == 3 and queue.in_flight_count == 3


def test_an_inactive_scanners_commands_are_held_and_issued_once_it_is_active() -> None:
    queue = _queue(_request("p1", "portscan", priority=10), _request("c1", "compliance"))

    issued = queue.issue(now=NOW, cap=5, timeout=TIMEOUT, pools={"portscan": 0, "compliance": 5})

    assert [item.command.command_id for item in issued] == ["c1"]
    assert queue.waiting_request("p1") is not None
    later = queue.issue(now=NOW, cap=5, timeout=TIMEOUT, pools={"portscan": 1, "compliance": 5})
    assert [item.command.command_id for item in later] == ["p1"]


def test_an_unregistered_scanner_shares_the_ceiling_only() -> None:
    queue = _queue(*(_request(f"n{i}", "nmap") for i in range(3)))

    issued = queue.issue(now=NOW, cap=2, timeout=TIMEOUT, pools={"compliance": 1})

    assert len(issued) == 2


def test_a_commands_deadline_is_its_scanners_timeout() -> None:
    queue = _queue(_request("slow", "portscan"), _request("other", "nmap"))

    issued = queue.issue(
        now=NOW,
        cap=5,
        timeout=TIMEOUT,
        pools={"portscan": 1},
        timeouts={"portscan": timedelta(hours=2)},
    )

    deadlines = {item.command.command_id: item.command.deadline for item in issued}
    assert deadlines == {"slow": NOW + timedelta(hours=2), "other": NOW + TIMEOUT}


def test_recovered_commands_count_in_their_pool() -> None:
    queue = DispatchQueue()
    queue.restore_in_flight(_request("out", "portscan"), NOW + TIMEOUT)
    queue.request(_request("next", "portscan"))

    assert queue.issue(now=NOW, cap=5, timeout=TIMEOUT, pools={"portscan": 1}) == []
    assert queue.in_flight_for_scanner("portscan") == 1


@settings(max_examples=60, deadline=None)
@given(
    commands=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 10)), min_size=1, max_size=40
    ),
    pools=st.fixed_dictionaries(
        {"a": st.integers(0, 4), "b": st.integers(0, 4), "c": st.integers(0, 4)}
    ),
    cap=st.integers(1, 8),
    ends=st.lists(st.integers(0, 39), max_size=20),
)
def test_no_pool_and_no_ceiling_is_ever_exceeded(
    commands: list[tuple[str, int]], pools: dict[str, int], cap: int, ends: list[int]
) -> None:
    queue = _queue(
        *(_request(f"x{i}", scanner, priority) for i, (scanner, priority) in enumerate(commands))
    )
    issued_ids: list[str] = []
    for end in [None, *ends]:
        if end is not None and end < len(issued_ids):
            queue.release(issued_ids[end], ReleaseOutcome.COMPLETED)
        issued = queue.issue(now=NOW, cap=cap, timeout=TIMEOUT, pools=pools)
        issued_ids.extend(item.command.command_id for item in issued)
        assert queue.in_flight_count <= cap
        for scanner, pool in pools.items():
            assert queue.in_flight_for_scanner(scanner) <= pool
    # Nothing is dropped: every command is issued or still waits.
    waiting = sum(queue.waiting_by_scanner().values())
    assert waiting + len(set(issued_ids)) == len(commands)
    # A pool with room and commands waiting is not left idle under a ceiling with room.
    if queue.in_flight_count < cap:
        for scanner, count in queue.waiting_by_scanner().items():
            assert queue.in_flight_for_scanner(scanner) >= pools[scanner], (scanner, count)


def test_a_schedule_burst_does_not_push_a_host_past_its_promise() -> None:
    """The forecast's case: two slots, a schedule's four commands at a higher priority, and a
    host whose promise runs out in 90 minutes: with the guard, the host takes a slot first."""
    burst = [_request(f"inventory-{i}", "inventory", priority=9) for i in range(4)]
    late = dispatch_request("late", priority=3).model_copy(
        update={"promise_at": NOW + timedelta(minutes=90)}
    )
    queue = _queue(*burst, late)

    issued = queue.issue(now=NOW, cap=2, timeout=TIMEOUT, promise_guard_minutes=120)

    assert "late" in [item.command.command_id for item in issued]
    unguarded = _queue(*burst, late.model_copy(update={"command_id": "late-2"}))
    first = unguarded.issue(now=NOW, cap=2, timeout=TIMEOUT, promise_guard_minutes=0)
    assert "late-2" not in [item.command.command_id for item in first]
