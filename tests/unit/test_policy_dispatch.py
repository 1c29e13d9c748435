"""The global dispatch queue: priority order, the fleet-wide cap, deadlines, idempotency."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.base import CommandReason
from schemas.internal import ReleaseOutcome
from streams.policy.dispatch import DispatchQueue, aged_priority
from streams.policy.host import decide
from streams.policy.ids import message_id
from tests.unit.factories import (
    DEFAULT_CONFIG,
    HOST,
    NOW,
    command_issued,
    dispatch_request,
    host_created,
    host_deleted,
)

TIMEOUT = timedelta(seconds=600)
MINUTE = timedelta(minutes=1)


def issued_ids(queue: DispatchQueue, *, now: datetime = NOW, cap: int = 100) -> list[str]:
    return [issued.command.command_id for issued in queue.issue(now=now, cap=cap, timeout=TIMEOUT)]


def test_issues_by_priority_then_earliest_due() -> None:
    queue = DispatchQueue()
    queue.request(dispatch_request("low-early", priority=3, due_at=NOW - timedelta(hours=5)))
    queue.request(dispatch_request("high-late", priority=9, due_at=NOW))
    queue.request(dispatch_request("high-early", priority=9, due_at=NOW - MINUTE))
    queue.request(dispatch_request("mid", priority=6, due_at=NOW - timedelta(hours=1)))

    assert issued_ids(queue) == ["high-early", "high-late", "mid", "low-early"]


def test_never_issues_more_than_the_cap() -> None:
    queue = DispatchQueue()
    for number in range(5):
        queue.request(dispatch_request(f"cmd-{number}", priority=10 - number))

    first = issued_ids(queue, cap=2)
    again = issued_ids(queue, cap=2)

    assert first == ["cmd-0", "cmd-1"]
    assert again == []
    assert queue.in_flight_count == 2
    assert queue.waiting_count == 3


def test_release_frees_a_slot_for_the_next_waiting_command() -> None:
    queue = DispatchQueue()
    for number in range(3):
        queue.request(dispatch_request(f"cmd-{number}", priority=10 - number))
    issued_ids(queue, cap=2)

    assert queue.release("cmd-0", ReleaseOutcome.COMPLETED) is True

    assert issued_ids(queue, now=NOW + MINUTE, cap=2) == ["cmd-2"]
    assert queue.in_flight_ids() == {"cmd-1", "cmd-2"}


def test_release_of_a_waiting_command_drops_it() -> None:
    queue = DispatchQueue()
    queue.request(dispatch_request("cmd-1"))

    assert queue.release("cmd-1", ReleaseOutcome.SUPERSEDED) is True

    assert queue.waiting_count == 0
    assert issued_ids(queue) == []


def test_release_of_an_unknown_command_reports_false() -> None:
    queue = DispatchQueue()
    assert queue.release("never-seen", ReleaseOutcome.COMPLETED) is False
    assert queue.in_flight_count == 0


def test_a_command_held_for_another_host_is_told_apart_from_its_own_hosts() -> None:
    queue = DispatchQueue()
    queue.request(dispatch_request("waiting", host_id="h-1"))
    queue.request(dispatch_request("flying", host_id="h-2", priority=9))
    issued_ids(queue, cap=1)

    assert queue.in_flight_ids() == {"flying"}
    assert queue.held_for_another_host("flying", "h-1")
    assert queue.held_for_another_host("waiting", "h-2")
    assert not queue.held_for_another_host("flying", "h-2")
    assert not queue.held_for_another_host("waiting", "h-1")
    assert not queue.held_for_another_host("never-seen", "h-1")


def test_duplicate_request_while_waiting_is_absorbed() -> None:
    queue = DispatchQueue()
    assert queue.request(dispatch_request("cmd-1", priority=5)) is True

    assert queue.request(dispatch_request("cmd-1", priority=5)) is False
    assert queue.request(dispatch_request("cmd-1", priority=2)) is False

    assert queue.waiting_count == 1
    [issued] = queue.issue(now=NOW, cap=5, timeout=TIMEOUT)
    assert issued.command.priority == 5


def test_duplicate_request_while_in_flight_is_absorbed() -> None:
    queue = DispatchQueue()
    queue.request(dispatch_request("cmd-1"))
    issued_ids(queue)

    assert queue.request(dispatch_request("cmd-1", priority=10)) is False
    assert issued_ids(queue, now=NOW + MINUTE) == []
    assert queue.in_flight_count == 1


def test_request_for_a_released_command_is_absorbed() -> None:
    queue = DispatchQueue()
    queue.request(dispatch_request("cmd-1"))
    issued_ids(queue)
    queue.release("cmd-1", ReleaseOutcome.COMPLETED)

    assert queue.request(dispatch_request("cmd-1")) is False
    assert issued_ids(queue, now=NOW + MINUTE) == []


def test_request_for_a_command_released_before_a_failover_is_absorbed() -> None:
    queue = DispatchQueue()  # The new owner's queue, rebuilt from the dispatcher table.
    queue.restore_released("cmd-1")

    assert queue.request(dispatch_request("cmd-1")) is False
    assert issued_ids(queue) == []


def test_higher_priority_request_moves_a_waiting_command_forward() -> None:
    queue = DispatchQueue()
    queue.request(dispatch_request("scheduled", priority=3, due_at=NOW - timedelta(hours=1)))
    queue.request(dispatch_request("other", priority=7))

    assert queue.request(dispatch_request("scheduled", priority=10, due_at=NOW)) is True

    issued = queue.issue(now=NOW, cap=5, timeout=TIMEOUT)
    assert [i.command.command_id for i in issued] == ["scheduled", "other"]
    assert issued[0].command.priority == 10
    assert queue.waiting_count == 0


def test_issued_command_carries_the_request_and_its_deadline() -> None:
    queue = DispatchQueue()
    request = dispatch_request("cmd-1", priority=9, due_at=NOW - MINUTE, host_id=HOST, attempt=2)
    queue.request(request)
    at = NOW + 30 * timedelta(seconds=1)

    [issued] = queue.issue(now=at, cap=1, timeout=TIMEOUT)

    command = issued.command
    assert issued.request == request
    assert command.command_id == "cmd-1" and command.host_id == HOST
    assert command.priority == 9 and command.attempt == 2
    assert command.reason is request.reason and command.state is request.state
    assert command.due_at == NOW - MINUTE
    assert command.issued_at == at
    assert command.deadline == at + TIMEOUT
    assert command.event_id == message_id("scan-command", "cmd-1")
    assert queue.next_deadline() == at + TIMEOUT


def test_expire_returns_commands_past_their_deadline_and_frees_their_slots() -> None:
    queue = DispatchQueue()
    queue.request(dispatch_request("early", priority=9))
    queue.request(dispatch_request("late", priority=8))
    queue.issue(now=NOW, cap=1, timeout=TIMEOUT)
    queue.issue(now=NOW + MINUTE, cap=2, timeout=TIMEOUT)

    assert queue.expire(NOW + TIMEOUT - timedelta(seconds=1)) == []
    expired = queue.expire(NOW + TIMEOUT + timedelta(seconds=1))

    assert [request.command_id for request in expired] == ["early"]
    assert queue.in_flight_ids() == {"late"}
    assert queue.next_deadline() == NOW + MINUTE + TIMEOUT
    assert queue.request(dispatch_request("early")) is False  # An expired command stays gone.


def test_released_command_does_not_expire() -> None:
    queue = DispatchQueue()
    queue.request(dispatch_request("cmd-1"))
    issued_ids(queue)
    queue.release("cmd-1", ReleaseOutcome.COMPLETED)

    assert queue.next_deadline() is None
    assert queue.expire(NOW + 2 * TIMEOUT) == []


def test_restored_command_counts_against_the_cap_and_expires() -> None:
    queue = DispatchQueue()
    restored = dispatch_request("restored", priority=5)
    queue.restore_in_flight(restored, NOW + MINUTE)
    queue.request(dispatch_request("waiting", priority=10))

    assert issued_ids(queue, cap=1) == []
    assert queue.request(restored) is False
    assert queue.expire(NOW + 2 * MINUTE) == [restored]
    assert issued_ids(queue, now=NOW + 2 * MINUTE, cap=1) == ["waiting"]


def test_recreated_host_gets_its_first_command_issued() -> None:
    """A host deleted and created again must be scanned again.

    Its first command after re-creation must not be mistaken for the released first command
    of its previous life, or the host stays claimed forever without a command.
    """
    queue = DispatchQueue()
    created = decide(None, host_created(at=NOW), now=NOW, config=DEFAULT_CONFIG)
    [first] = created.dispatch
    queue.request(first)
    queue.issue(now=NOW, cap=5, timeout=TIMEOUT)
    running = decide(
        created.schedule, command_issued(first.command_id, at=NOW), now=NOW, config=DEFAULT_CONFIG
    )
    deleted = decide(
        running.schedule, host_deleted(at=NOW + MINUTE), now=NOW + MINUTE, config=DEFAULT_CONFIG
    )
    for release in deleted.releases:
        queue.release(release.command_id, release.outcome)

    again = decide(
        None, host_created(at=NOW + 2 * MINUTE), now=NOW + 2 * MINUTE, config=DEFAULT_CONFIG
    )
    [request] = again.dispatch
    queue.request(request)
    issued = queue.issue(now=NOW + 2 * MINUTE, cap=5, timeout=TIMEOUT)

    assert [i.command.host_id for i in issued] == [HOST]


# --- properties ---------------------------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("request"),
            st.integers(0, 11),  # Command number: a small pool makes duplicates common.
            st.integers(1, 10),  # Priority.
            st.integers(-120, 120),  # Due, minutes from NOW.
        ),
        st.tuples(st.just("release"), st.integers(0, 11)),
        st.tuples(st.just("advance"), st.integers(0, 15)),  # Minutes, then expire.
        st.tuples(st.just("issue")),
    ),
    max_size=60,
)


def reference_rank(priority: int, due: datetime, *, now: datetime, aging: int) -> int:
    """One step per `aging` minutes waited past `due`, at most 10; `aging` 0 = the priority."""
    if aging == 0 or now <= due:
        return priority
    return min(priority + (now - due) // (aging * MINUTE), 10)


@settings(max_examples=300, deadline=None)
@given(ops=operations, cap=st.integers(1, 4), aging=st.sampled_from([0, 0, 1, 7, 30, 120]))
def test_queue_respects_cap_and_issues_best_waiting_first(
    ops: list[tuple[object, ...]], cap: int, aging: int
) -> None:
    queue = DispatchQueue()
    now = NOW
    waiting: dict[str, tuple[int, datetime]] = {}  # Reference model: command -> key.
    in_flight: dict[str, datetime] = {}
    gone: set[str] = set()
    ever_issued: list[str] = []

    for op in ops:
        if op[0] == "request":
            _, number, priority, due = op
            command = f"cmd-{number}"
            request = dispatch_request(command, priority=priority, due_at=NOW + due * MINUTE)
            current = waiting.get(command)
            fresh = (
                command not in in_flight
                and command not in gone
                and (current is None or current[0] < priority)
            )
            assert queue.request(request) is fresh
            if fresh:
                waiting[command] = (priority, request.due_at)
        elif op[0] == "release":
            command = f"cmd-{op[1]}"
            known = command in waiting or command in in_flight
            assert queue.release(command, ReleaseOutcome.COMPLETED) is known
            waiting.pop(command, None)
            in_flight.pop(command, None)
            gone.add(command)
        elif op[0] == "advance":
            now += op[1] * MINUTE
            expired = {request.command_id for request in queue.expire(now)}
            assert expired == {c for c, deadline in in_flight.items() if deadline <= now}
            for command in expired:
                del in_flight[command]
                gone.add(command)
        else:
            issued = queue.issue(now=now, cap=cap, timeout=TIMEOUT, aging_minutes=aging)

            def key(command: str, at: datetime = now) -> tuple[int, datetime]:
                priority, due = waiting[command]
                return (-reference_rank(priority, due, now=at, aging=aging), due)

            keys = [key(i.command.command_id) for i in issued]
            assert keys == sorted(keys)
            assert len(issued) == min(len(waiting), cap - len(in_flight))
            for item in issued:
                command = item.command.command_id
                assert item.command.priority == waiting[command][0]
                assert item.command.deadline == now + TIMEOUT
                del waiting[command]
                in_flight[command] = now + TIMEOUT
                ever_issued.append(command)
            if keys and waiting:
                best_left = min(key(command) for command in waiting)
                assert best_left >= keys[-1]

        assert queue.in_flight_count <= cap
        assert queue.in_flight_ids() == set(in_flight)
        assert queue.waiting_count == len(waiting)

    assert len(ever_issued) == len(set(ever_issued))


# --- anti-starvation: priority aging ------------------------------------------------


def test_aging_is_off_by_default_and_a_stream_of_critical_commands_starves_a_low_one() -> None:
    assert DEFAULT_CONFIG.priority_aging_minutes == 0
    issued = _serve_stream(low_priority=3, stream_priority=9, aging=0, minutes=24 * 60)
    assert "low" not in issued


def test_with_aging_a_waiting_low_priority_command_is_issued_after_its_steps() -> None:
    # Priority 3 needs six steps to tie with 9; at 10 minutes a step, one hour past due.
    issued = _serve_stream(low_priority=3, stream_priority=9, aging=10, minutes=24 * 60)
    assert issued.index("low") == 60


def test_aged_rank_climbs_one_step_per_period_and_stops_at_the_top() -> None:
    request = dispatch_request("c", priority=2, due_at=NOW)
    ranks = [
        aged_priority(request, now=NOW + minutes * MINUTE, aging_minutes=15)
        for minutes in (-5, 0, 14, 15, 29, 30, 600)
    ]
    assert ranks == [2, 2, 2, 3, 3, 4, 10]
    assert aged_priority(request, now=NOW + 600 * MINUTE, aging_minutes=0) == 2


def _serve_stream(
    *, low_priority: int, stream_priority: int, aging: int, minutes: int
) -> list[str]:
    """Cap 1; one low command due at NOW; each minute one new stream command arrives, the one
    in flight completes, and one is issued. Returns the ids issued, one per minute."""
    queue = DispatchQueue()
    queue.request(dispatch_request("low", priority=low_priority, due_at=NOW))
    issued: list[str] = []
    for minute in range(minutes):
        now = NOW + minute * MINUTE
        queue.request(dispatch_request(f"s-{minute}", priority=stream_priority, due_at=now))
        [item] = queue.issue(now=now, cap=1, timeout=TIMEOUT, aging_minutes=aging)
        issued.append(item.command.command_id)
        queue.release(item.command.command_id, ReleaseOutcome.COMPLETED)
    return issued


@settings(max_examples=200, deadline=None)
@given(
    low=st.integers(1, 9),
    stream=st.integers(2, 10),
    aging=st.integers(1, 60),
    backlog=st.integers(0, 3),
)
def test_with_aging_no_waiting_command_is_starved_by_higher_priorities(
    low: int, stream: int, aging: int, backlog: int
) -> None:
    """Whatever the priorities, a low command is issued within (steps to the top) x aging
    minutes of its due time, plus the backlog ahead of it, while the cap binds and fresh
    higher-priority commands arrive as fast as they are served."""
    stream = max(stream, low + 1)
    queue = DispatchQueue()
    queue.request(dispatch_request("low", priority=low, due_at=NOW))
    for number in range(backlog):  # Older higher-priority commands already waiting.
        queue.request(
            dispatch_request(f"b-{number}", priority=stream, due_at=NOW - (number + 1) * MINUTE)
        )
    bound = (stream - low) * aging + backlog
    for minute in range(bound + 1):
        now = NOW + minute * MINUTE
        queue.request(dispatch_request(f"s-{minute}", priority=stream, due_at=now))
        [item] = queue.issue(now=now, cap=1, timeout=TIMEOUT, aging_minutes=aging)
        queue.release(item.command.command_id, ReleaseOutcome.COMPLETED)
        if item.command.command_id == "low":
            assert item.command.priority == low  # The command keeps its own priority.
            return
    raise AssertionError(f"low command still waiting after {bound} minutes")


def test_a_force_for_a_command_already_out_at_its_scheduled_reason_is_answered() -> None:
    queue = DispatchQueue()
    queue.request(dispatch_request("out", priority=3))
    queue.request(dispatch_request("waiting", priority=3))
    queue.request(dispatch_request("forced", priority=10, reason=CommandReason.FORCE))
    assert issued_ids(queue, cap=2) == ["forced", "out"]
    force = CommandReason.FORCE

    for command, answered in (("out", True), ("forced", False)):
        again = dispatch_request(command, priority=10, reason=force)
        assert queue.request(again) is False
        assert queue.issued_before_force(again) is answered, command
    moved_up = dispatch_request("waiting", priority=10, reason=force)
    assert queue.request(moved_up) is True
    assert queue.issued_before_force(moved_up) is False
    assert queue.issued_before_force(dispatch_request("out", priority=3)) is False

    queue.release("out", ReleaseOutcome.COMPLETED)
    ended = dispatch_request("out", priority=10, reason=force)
    assert queue.request(ended) is False and queue.issued_before_force(ended) is True


def test_the_waiting_request_is_the_highest_asked_and_gone_once_issued_or_released() -> None:
    queue = DispatchQueue()
    queue.request(dispatch_request("a", priority=3))
    queue.request(dispatch_request("a", priority=7))
    queue.request(dispatch_request("b", priority=3))

    waiting = queue.waiting_request("a")
    assert waiting is not None and waiting.priority == 7
    queue.release("b", ReleaseOutcome.SUPERSEDED)
    assert queue.waiting_request("b") is None
    assert issued_ids(queue, cap=1) == ["a"]
    assert queue.waiting_request("a") is None
