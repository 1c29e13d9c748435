"""The operator's controls hold for work already queued, in the dispatcher stage, in process:
with the scheduler off nothing more is issued, and a withdrawn claim that waits is dropped and
answered. The stage runs on dict tables and an in-memory outbox."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from kairos.floor.clock import FrozenClock
from kairos.floor.settings import Settings
from schemas.base import WithdrawReason
from schemas.internal import (
    ClaimWithdrawn,
    CommandWithdrawn,
    DispatchBatch,
    DispatcherWoken,
    ReleaseOutcome,
    SlotReleased,
)
from streams import codec
from streams.metrics import WorkerMetrics
from streams.stages.control import Control
from streams.stages.dispatcher import Dispatcher
from tests.unit.factories import NOW, dispatch_request


class _Store(dict[str, bytes]):
    @property
    def data(self) -> dict[str, bytes]:
        return self


class _Table:
    def __init__(self) -> None:
        self.data = _Store()

    def items(self) -> list[tuple[str, bytes]]:
        return list(self.data.items())


class _Sends:
    """What the dispatcher writes: its table, and the signals it sends to hosts."""

    def __init__(self) -> None:
        self.signals: list[Any] = []

    @contextlib.asynccontextmanager
    async def batching(self) -> AsyncIterator[list[asyncio.Future[Any]]]:
        yield []

    async def put_queued(
        self, table: _Table, key: str, value: bytes | None, partition: int, headers: Any = ()
    ) -> None:
        if value is None:
            table.data.pop(key, None)
        else:
            table.data[key] = value

    async def send(
        self, topic: str, key: bytes | None, value: bytes, partition: Any = None
    ) -> None:
        self.signals.append(codec.decode(codec.host_signal, value))


def _dispatcher(sends: _Sends, *, cap: int = 1, enabled: bool = True) -> Dispatcher:
    settings = Settings()
    control = Control(settings, None, None, None, None)  # type: ignore[arg-type]
    control.config = control.config.model_copy(
        update={"max_concurrent_scans": cap, "enabled": enabled}
    )
    return Dispatcher(
        app=None,
        settings=settings,
        clock=FrozenClock(NOW),
        control=control,
        table=_Table(),
        topic=None,
        direct=sends,  # type: ignore[arg-type]
        guard=None,  # type: ignore[arg-type]
        metrics=WorkerMetrics(),
        counters=Counter(),
    )


def _issued(dispatcher: Dispatcher) -> list[str]:
    return [command.command_id for command, _ in dispatcher.outbox.pending]


def _set_enabled(dispatcher: Dispatcher, enabled: bool) -> None:
    control = dispatcher._control
    config = control.config
    control.config = config.model_copy(update={"enabled": enabled, "version": config.version + 1})


async def test_off_issues_nothing_and_holds_the_queue_in_rank_order_until_on() -> None:
    sends = _Sends()
    dispatcher = _dispatcher(sends, cap=1)
    await dispatcher.handle(
        DispatchBatch(
            messages=(
                dispatch_request("running", priority=9, host_id="host-a"),
                dispatch_request("low", priority=3, host_id="host-b"),
                dispatch_request("high", priority=8, host_id="host-c"),
            )
        )
    )
    assert _issued(dispatcher) == ["running"]  # the cap binds: two wait
    _set_enabled(dispatcher, False)

    await dispatcher.handle(SlotReleased(command_id="running", outcome=ReleaseOutcome.COMPLETED))
    await dispatcher.handle(DispatcherWoken(at=NOW))

    assert _issued(dispatcher) == ["running"], "a held command was issued while off"
    assert dispatcher.queue.waiting_count == 2

    _set_enabled(dispatcher, True)
    await dispatcher.handle(DispatcherWoken(at=NOW))
    assert _issued(dispatcher) == ["running", "high"]


async def test_off_does_not_wake_the_dispatcher_for_free_slots() -> None:
    sends = _Sends()
    dispatcher = _dispatcher(sends, cap=5, enabled=False)
    await dispatcher.handle(dispatch_request("held", host_id="host-a"))
    woken: list[bytes] = []

    class _Topic:
        async def send(self, *, key: bytes, value: bytes) -> None:
            woken.append(value)

    dispatcher.topic = _Topic()
    dispatcher.owned = lambda: True  # type: ignore[method-assign]

    await dispatcher.wake_if_needed(NOW)
    assert woken == []
    _set_enabled(dispatcher, True)
    await dispatcher.wake_if_needed(NOW)
    assert len(woken) == 1


async def test_a_waiting_claim_withdrawn_is_dropped_and_answered() -> None:
    sends = _Sends()
    dispatcher = _dispatcher(sends, cap=1)
    await dispatcher.handle(
        DispatchBatch(
            messages=(
                dispatch_request("running", host_id="host-a"),
                dispatch_request("waiting", host_id="host-b"),
            )
        )
    )

    await dispatcher.handle(
        ClaimWithdrawn(command_id="waiting", host_id="host-b", reason=WithdrawReason.MAINTENANCE)
    )
    await dispatcher.handle(SlotReleased(command_id="running", outcome=ReleaseOutcome.COMPLETED))

    assert _issued(dispatcher) == ["running"], "the withdrawn claim took the freed slot"
    [answer] = sends.signals
    assert isinstance(answer, CommandWithdrawn)
    assert (answer.host_id, answer.command_id, answer.reason) == (
        "host-b",
        "waiting",
        WithdrawReason.MAINTENANCE,
    )
    assert dispatcher._counters["commands_withdrawn_maintenance"] == 1
    # A late request for it (recovery asks again) is absorbed.
    await dispatcher.handle(dispatch_request("waiting", host_id="host-b"))
    assert dispatcher.queue.waiting_count == 0


async def test_a_claim_already_issued_is_not_withdrawn_nor_answered() -> None:
    sends = _Sends()
    dispatcher = _dispatcher(sends, cap=1)
    await dispatcher.handle(dispatch_request("running", host_id="host-a"))

    await dispatcher.handle(
        ClaimWithdrawn(command_id="running", host_id="host-a", reason=WithdrawReason.DOWN)
    )

    assert sends.signals == []
    assert dispatcher.queue.in_flight_count == 1


async def test_a_claim_the_queue_never_knew_is_answered() -> None:
    sends = _Sends()
    dispatcher = _dispatcher(sends)

    await dispatcher.handle(
        ClaimWithdrawn(command_id="lost", host_id="host-a", reason=WithdrawReason.INACTIVE)
    )

    assert [signal.command_id for signal in sends.signals] == ["lost"]


async def test_a_deleted_hosts_waiting_claim_counts_as_withdrawn() -> None:
    sends = _Sends()
    dispatcher = _dispatcher(sends, cap=1)
    await dispatcher.handle(
        DispatchBatch(
            messages=(
                dispatch_request("running", host_id="host-a"),
                dispatch_request("waiting", host_id="host-b"),
            )
        )
    )

    await dispatcher.handle(SlotReleased(command_id="waiting", outcome=ReleaseOutcome.SUPERSEDED))

    assert dispatcher._counters["commands_withdrawn_deleted"] == 1
    assert dispatcher.queue.waiting_count == 0
