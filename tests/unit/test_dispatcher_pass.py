"""A dispatcher pass that fails part-way: the commands whose slots it wrote still leave, once
those slots are acknowledged, and no other does."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kairos.floor.clock import FrozenClock
from kairos.floor.settings import Settings
from schemas.internal import DispatchBatch
from streams.direct import SendRefused
from streams.metrics import WorkerMetrics
from streams.stages.control import Control
from streams.stages.dispatcher import Dispatcher
from tests.unit.factories import NOW, dispatch_request


class _Store(dict[str, bytes]):
    """A Faust memory store as `streams.direct` reads it: `table.data.data` is the dict."""

    @property
    def data(self) -> dict[str, bytes]:
        return self


class _Table:
    def __init__(self) -> None:
        self.data = _Store()


class _Sends:
    """Stands in for `DirectSends`: what the dispatcher queues, with an ack per slot written
    that the test resolves, and a broker that refuses the slot after `slots_taken`."""

    def __init__(self, slots_taken: int) -> None:
        self.slots_taken = slots_taken
        self.slots: list[str] = []
        self.slot_acks: list[asyncio.Future[Any]] = []
        self.commands: list[bytes] = []
        self._acks: list[asyncio.Future[Any]] | None = None

    @contextlib.asynccontextmanager
    async def batching(self) -> AsyncIterator[list[asyncio.Future[Any]]]:
        if self._acks is not None:
            yield self._acks
            return
        acks: list[asyncio.Future[Any]] = []
        self._acks = acks
        try:
            yield acks
        finally:
            self._acks = None

    async def put_queued(
        self, table: _Table, key: str, value: bytes | None, partition: int, headers: Any = ()
    ) -> None:
        if value is not None and b'"issued_at"' in value:
            if len(self.slots) == self.slots_taken:
                raise SendRefused("the broker refused the dispatcher table's record")
            self.slots.append(key)
            acked = asyncio.get_running_loop().create_future()
            self.slot_acks.append(acked)
            assert self._acks is not None, "a slot is written inside the pass's batching"
            self._acks.append(acked)
        if value is None:
            table.data.pop(key, None)
        else:
            table.data[key] = value

    async def queue(self, topic: str, key: bytes, value: bytes | None, partition: int) -> None:
        assert value is not None
        self.commands.append(key)

    async def send(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("nothing in this pass is sent outside a batch")


def _dispatcher(sends: _Sends) -> Dispatcher:
    settings = Settings()
    return Dispatcher(
        app=None,
        settings=settings,
        clock=FrozenClock(NOW),
        control=Control(settings, None, None, None, None),  # type: ignore[arg-type]
        table=_Table(),
        topic=None,
        direct=sends,  # type: ignore[arg-type]
        guard=None,  # type: ignore[arg-type]
        metrics=WorkerMetrics(),
        counters=Counter(),
    )


async def test_a_pass_failing_after_a_slot_sends_its_command_once_the_slot_is_acked() -> None:
    sends = _Sends(slots_taken=1)
    dispatcher = _dispatcher(sends)
    requests = DispatchBatch(
        messages=(
            dispatch_request("first", priority=9, host_id="host-a"),
            dispatch_request("second", priority=5, host_id="host-b"),
        )
    )
    sending = asyncio.create_task(dispatcher.send_issued_commands())
    try:
        with pytest.raises(SendRefused):
            await dispatcher.handle(requests)

        assert sends.slots == ["first"]
        await asyncio.sleep(0.05)
        assert sends.commands == [], "a command left before its slot was acknowledged"

        sends.slot_acks[0].set_result(None)
        for _ in range(100):
            if sends.commands:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        assert sends.commands == [b"host-a"]
    finally:
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending


async def test_a_pass_failing_before_any_slot_sends_nothing() -> None:
    sends = _Sends(slots_taken=0)
    dispatcher = _dispatcher(sends)
    sending = asyncio.create_task(dispatcher.send_issued_commands())
    try:
        with pytest.raises(SendRefused):
            await dispatcher.handle(dispatch_request("only", host_id="host-a"))
        await asyncio.sleep(0.05)

        assert sends.slots == [] and sends.commands == []
    finally:
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending
