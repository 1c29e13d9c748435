"""Which hosts each partition holds, so a schedule's fan-out reads one partition, not the table.

Faust's memory store keeps every partition's rows in one dict; without this index each
partition's part of a run would walk (and hash) every host the worker holds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from aiokafka.partitioner import murmur2


def partition_of(key: str, partitions: int) -> int:
    """The partition the producers' default partitioner picks for `key` (murmur2, as Java)."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def by_partition(
    keys: Iterable[str], partitions: int, per_group: int
) -> Iterator[tuple[int, tuple[str, ...]]]:
    """`keys` grouped by their partition, in groups of at most `per_group`, each partition's
    keys in the order given: one due signal per group."""
    grouped: defaultdict[int, list[str]] = defaultdict(list)
    for key in keys:
        grouped[partition_of(key, partitions)].append(key)
    for partition, members in grouped.items():
        for start in range(0, len(members), per_group):
            yield partition, tuple(members[start : start + per_group])


class HostsByPartition:
    """Host ids by partition, kept beside the `hosts` table and rebuilt with it on recovery.

    Each partition's ids are the keys of a dict, not a set: a set's hash table is kept much
    sparser than a dict's compact one, so it costs several times the memory per host, and a
    dict keeps the order hosts came in."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._members: defaultdict[int, dict[str, None]] = defaultdict(dict)

    def add(self, host_id: str) -> None:
        self._members[partition_of(host_id, self.partitions)][host_id] = None

    def discard(self, host_id: str) -> None:
        self._members[partition_of(host_id, self.partitions)].pop(host_id, None)

    def members(self, partition: int) -> Iterable[str]:
        """A snapshot: callers may await while reading it."""
        return tuple(self._members.get(partition, ()))

    def rebuild(self, host_ids: Iterable[str]) -> None:
        self._members.clear()
        for host_id in host_ids:
            self.add(host_id)
