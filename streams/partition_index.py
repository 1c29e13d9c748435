"""Which hosts each partition holds, so a schedule's fan-out reads one partition, not the table.

Faust's memory store keeps every partition's rows in one dict; without this index each
partition's part of a run would walk (and hash) every host the worker holds.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable, Iterator

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of `data` (Java's `Utils.murmur2`, aiokafka's `murmur2`), read four
    bytes at a time: the worker hashes the key of every input record it is handed."""
    length = len(data)
    h = _SEED ^ length
    words = length >> 2
    if words:
        for k in struct.unpack_from(f"<{words}I", data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    extra = length & 3
    if extra:
        tail = length - extra
        if extra == 3:
            h ^= data[tail + 2] << 16
        if extra >= 2:
            h ^= data[tail + 1] << 8
        h = ((h ^ data[tail]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def key_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's Java client (and aiokafka, and librdkafka's `murmur2_random`)
    picks for a record keyed `key` among `partitions`."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def partition_of(key: str, partitions: int) -> int:
    """The partition the producers' default partitioner picks for `key` (murmur2, as Java)."""
    return key_partition(key.encode(), partitions)


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
