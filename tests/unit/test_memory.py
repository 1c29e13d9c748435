"""Freed memory handed back to the operating system (kairos.floor.memory)."""

from __future__ import annotations

import resource

import pytest

from kairos.floor.memory import can_return_freed_memory, return_freed_memory

pytestmark = pytest.mark.skipif(
    not can_return_freed_memory(), reason="the C library here has no malloc_trim (not glibc)"
)


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def test_a_backlogs_freed_buffers_leave_the_resident_size() -> None:
    # Buffers the size of fetched records (above pymalloc's 512 B, so glibc's), with one
    # long-lived object after each few so that the freed ones sit below the heap's top,
    # where glibc alone never gives memory back.
    backlog: list[bytes] = []
    kept: list[bytes] = []
    for number in range(60_000):
        backlog.append(bytes(2_000 + number % 1_000))
        if number % 50 == 0:
            kept.append(bytes(600))
    return_freed_memory()
    holding = _resident_bytes()
    del backlog
    freed = _resident_bytes()

    assert return_freed_memory()
    returned = freed - _resident_bytes()

    assert holding - freed < 30_000_000, "glibc was expected to keep most of it"
    assert returned > 80_000_000
    del kept  # Alive until here: the freed buffers stayed below them while measured.
