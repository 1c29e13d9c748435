"""How the worker cuts what it sends into records (by size, by partition), bounds what it
fetches, and writes the dispatcher's table entries."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from kairos.floor.settings import Settings
from schemas.base import CommandReason, ComplianceState
from schemas.internal import DispatchRequested
from streams import codec
from streams.app import Worker
from streams.partition_index import HostsByPartition, by_partition, partition_of

AT = datetime(2026, 3, 1, 12, 30, 15, 250000, tzinfo=UTC)


def test_size_bounded_runs_stay_within_the_bound_and_keep_the_order() -> None:
    messages = [b"a" * 40, b"b" * 40, b"c" * 40, b"d" * 200, b"e" * 10]

    chunks = list(codec.size_bounded(messages, 100))

    # Each message counts with one separator byte: 41 + 41 fits, a third would pass 100.
    assert chunks == [[b"a" * 40, b"b" * 40], [b"c" * 40], [b"d" * 200], [b"e" * 10]]
    assert [m for chunk in chunks for m in chunk] == messages


def test_size_bounded_of_nothing_is_nothing() -> None:
    assert list(codec.size_bounded([], 100)) == []


def test_by_partition_groups_keys_in_order_and_caps_each_group() -> None:
    keys = [f"host-{n}" for n in range(50)]

    groups = list(by_partition(keys, 4, 5))

    assert all(len(members) <= 5 for _, members in groups)
    for partition, members in groups:
        assert {partition_of(key, 4) for key in members} == {partition}
    regrouped = {p: [k for q, ms in groups if q == p for k in ms] for p, _ in groups}
    for partition, members in regrouped.items():
        assert members == [key for key in keys if partition_of(key, 4) == partition]
    assert sorted(k for _, ms in groups for k in ms) == sorted(keys)


def _request(host_id: str = "host-1") -> DispatchRequested:
    return DispatchRequested(
        command_id="c-1",
        host_id=host_id,
        priority=7,
        due_at=AT,
        reason=CommandReason.SCHEDULED,
        state=ComplianceState.UNKNOWN,
        attempt=2,
        args={"ports": [22, 443], "note": 'ü " \\'},
    )


def test_hosts_by_partition_keeps_each_partitions_hosts_in_the_order_they_came() -> None:
    index = HostsByPartition(4)
    hosts = [f"host-{n}" for n in range(40)]
    for host in hosts:
        index.add(host)
    index.add(hosts[0])  # added again: still once, where it first came
    index.discard(hosts[1])
    index.discard("never-added")

    for partition in range(4):
        expected = [h for h in hosts if h != hosts[1] and partition_of(h, 4) == partition]
        assert list(index.members(partition)) == expected
    index.rebuild(["host-7"])
    assert [h for p in range(4) for h in index.members(p)] == ["host-7"]


def test_dispatcher_entries_read_back_as_written() -> None:
    request = _request()
    deadline = AT + timedelta(minutes=10)

    waiting = codec.read_dispatch_entry(codec.dispatch_waiting(request))
    slot = codec.read_dispatch_entry(codec.dispatch_slot(request, issued_at=AT, deadline=deadline))
    released = codec.read_dispatch_entry(codec.dispatch_released(AT))

    assert waiting == codec.DispatchEntry(request, None, None, None)
    assert slot == codec.DispatchEntry(request, AT, deadline, None)
    assert released == codec.DispatchEntry(None, None, None, AT)


def test_a_slot_from_before_slots_kept_their_issue_time_reads_its_deadline_for_it() -> None:
    request = _request()
    deadline = AT + timedelta(minutes=10)
    old = json.dumps({"request": request.model_dump(mode="json"), "deadline": deadline.isoformat()})

    assert codec.read_dispatch_entry(old.encode()) == codec.DispatchEntry(
        request, deadline, deadline, None
    )


def test_only_a_released_entry_holds_the_released_marker() -> None:
    request = _request(host_id='"released_at"')
    slot = codec.dispatch_slot(request, issued_at=AT, deadline=AT)

    assert codec.RELEASED_MARKER not in slot
    assert codec.RELEASED_MARKER not in codec.dispatch_waiting(request)
    assert codec.RELEASED_MARKER in codec.dispatch_released(AT)
    assert codec.read_dispatch_entry(slot).request == request


def test_the_worker_fetches_at_most_its_setting_from_a_partition_at_a_time() -> None:
    # Faust hands this to aiokafka as max_partition_fetch_bytes; its own default is 1 MiB.
    assert Worker(Settings()).app.conf.consumer_max_fetch_size == 256 * 1024
    smaller = Worker(Settings(consumer_fetch_bytes=128 * 1024))
    assert smaller.app.conf.consumer_max_fetch_size == 128 * 1024
