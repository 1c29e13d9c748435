"""How the worker cuts what it sends into records: by size, and by partition."""

from __future__ import annotations

from streams import codec
from streams.partition_index import by_partition, partition_of


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
