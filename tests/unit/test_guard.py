"""The poison guard: a message's value is encoded only when the message is parked."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from kairos.floor.clock import FrozenClock
from streams.guard import Guard
from streams.metrics import WorkerMetrics


class _Letters:
    """Stands in for the dead-letter topic's `send`; what a real one is sent is bytes."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, *, key: bytes | None, value: bytes) -> None:
        self.sent.append(json.loads(value))


def _guard(letters: _Letters) -> Guard:
    clock = FrozenClock(datetime(2026, 11, 26, tzinfo=UTC))
    return Guard(letters, clock, WorkerMetrics(), Counter())


async def test_a_lazy_value_is_encoded_when_its_message_is_parked_and_never_otherwise() -> None:
    letters = _Letters()
    guard = _guard(letters)
    encodes: list[str] = []

    def raw() -> bytes:
        encodes.append("encoded")
        return b'{"schedule_id":"nightly"}'

    async def fine() -> None:
        return None

    async def broken() -> None:
        raise ValueError("no such day")

    origin = ("kairos-host-signals", 3, 41, b"nightly", raw)

    await guard.handled(origin, fine())
    assert encodes == []
    await guard.handled(origin, broken())

    assert encodes == ["encoded"]
    (letter,) = letters.sent
    assert letter["raw"] == '{"schedule_id":"nightly"}'
    assert letter["error"] == "handling failed: ValueError: no such day"
    assert (letter["source_topic"], letter["partition"], letter["offset"]) == (
        "kairos-host-signals",
        3,
        41,
    )
