"""Hands memory the process has freed back to the operating system (worker, projector).

A backlog (onboarding a fleet, a restart replaying the changelogs) has the consumer hold
fetched records by the megabyte. Once they are handled, glibc keeps the freed pages: it
returns memory only from the top of its heap, and after a large buffer is freed it serves
the next ones from the heap too (its mmap threshold rises). The resident size then stays at
the backlog's high-water mark, which is what an operator sizing a fleet by RSS pays for.
`malloc_trim(0)` gives the free pages anywhere in the heap back.

The call runs in a thread of its own: ctypes lets go of the GIL for it, so the event loop
goes on while glibc walks its heap, which takes long after a large backlog was freed and
next to nothing when there is nothing to give back.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

RETURN_EVERY_SECONDS = 10.0


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    try:
        # The process's own symbols, libc's among them: no library search at import.
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


_TRIM = _malloc_trim()


def can_return_freed_memory() -> bool:
    return _TRIM is not None


def return_freed_memory() -> bool:
    """Give the heap's free pages back now; True if glibc released any."""
    return bool(_TRIM(0)) if _TRIM is not None else False


def keep_returning_freed_memory(every_seconds: float = RETURN_EVERY_SECONDS) -> None:
    """From now on, return freed memory every `every_seconds` for the life of the process."""
    if _TRIM is None:
        log.info("freed memory stays with the process: the C library has no malloc_trim")
        return

    def run() -> None:
        while True:
            time.sleep(every_seconds)
            return_freed_memory()

    threading.Thread(target=run, name="kairos-memory-return", daemon=True).start()
