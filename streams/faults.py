"""Fault injection for tests: slow down the broker round trips where races hide.

Off unless a `KAIROS_FAULT_*` setting asks for it. It makes a race that needs an unlucky
scheduler on a loaded machine happen on every run, so a test can prove the race is closed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer

log = logging.getLogger(__name__)


def delay_offset_fetches(seconds: float) -> None:
    """Every committed-offset look-up of this process's consumers waits `seconds` first."""
    if seconds <= 0 or getattr(AIOKafkaConsumer.committed, "kairos_delayed", False):
        return
    committed = AIOKafkaConsumer.committed

    @functools.wraps(committed)
    async def delayed(self: AIOKafkaConsumer, partition: Any) -> Any:
        await asyncio.sleep(seconds)
        return await committed(self, partition)

    delayed.kairos_delayed = True  # type: ignore[attr-defined]
    AIOKafkaConsumer.committed = delayed  # type: ignore[method-assign]
    log.warning("fault injection: committed-offset look-ups delayed by %.2f s", seconds)
