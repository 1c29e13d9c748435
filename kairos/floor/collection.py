"""The garbage collector's pace for long-running Kairos processes (worker, projector).

With CPython's default thresholds (700, 10, 10) a process that decodes thousands of messages
per second collects its youngest generation several times per batch, and every few hundred
batches walks its whole heap, which makes decoding a batch several times slower than with
collection held off. Almost nothing these processes allocate forms cycles; the young
generations are still collected, only less often.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
"""Allocations between young collections: a few batches of decoded messages, a few MB."""
OLDER_THRESHOLDS = (20, 10)


def pace_for_streaming() -> None:
    """Collect less often, and never walk what the process built to start (imports, wiring)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
