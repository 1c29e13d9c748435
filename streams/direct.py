"""Records handed straight to Faust's own aiokafka producer, without Faust's per-record wrapping.

For every record Faust's `Topic.send` and `Table.__setitem__` build a pending message and a
future, run sensors and callbacks, which costs more than the scheduling policy itself. The
records here go to the same
aiokafka producer instead, so Faust's flush before every offset commit still covers them and
the records of one partition keep their order. A flush waits for the broker's answers but does
not read them: `DirectSends.raise_refused` does, before the worker commits (`streams.consumer`),
so an input is never committed after a record it produced was refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from typing import Any

import faust
from faust import current_event
from faust.exceptions import NotReady

PARTITION_IN_HAND: ContextVar[int | None] = ContextVar("partition_in_hand", default=None)
"""The input partition of the record a batch handler is handling (no Faust event there)."""


class _OpenBatches:
    def __init__(self) -> None:
        self.batches: dict[tuple[str, int], Any] = {}
        """The record batches being built, by topic and partition."""
        self.acks: list[asyncio.Future[Any]] = []
        """The acks of the batches sent so far."""


_OPEN_BATCHES: ContextVar[_OpenBatches | None] = ContextVar("open_batches", default=None)
"""While `DirectSends.batching` runs in this task: its record batches."""


Headers = Sequence[tuple[str, bytes]]
"""A record's headers, as aiokafka takes them."""

READ_AT_LEAST = 50_000
"""Futures kept unread before `send` reads the answers in (a commit reads them far sooner)."""


class SendRefused(Exception):
    """The producer gave up on a record (after its retries): what produced it must not be
    committed."""


class DirectSends:
    """Sends and table writes of the hot paths; the futures resolve on the broker's ack."""

    def __init__(self, app: faust.App) -> None:
        self._app = app
        self._unread: list[tuple[str, asyncio.Future[Any]]] = []
        """The topics and futures of records sent since their answers were last read."""
        self._refused: SendRefused | None = None
        self._read_at = READ_AT_LEAST

    def raise_refused(self) -> None:
        """Raise `SendRefused` if a record sent so far was refused; records still waiting for
        their answer are read at the next call."""
        self._read_answers()
        if self._refused is not None:
            raise self._refused

    def _read_answers(self) -> None:
        waiting = []
        for topic, acked in self._unread:
            if not acked.done():
                waiting.append((topic, acked))
            elif self._refused is None:
                error = (
                    asyncio.CancelledError("the send was cancelled")
                    if acked.cancelled()
                    else acked.exception()
                )
                if error is not None:
                    why = f"{type(error).__name__}: {error}"
                    refused = SendRefused(f"a record sent to {topic} was refused ({why})")
                    refused.__cause__ = error
                    self._refused = refused
        self._unread = waiting
        # Futures long unanswered (a broker away) are not walked again at every send.
        self._read_at = max(READ_AT_LEAST, 2 * len(waiting))

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        headers: Headers = (),
    ) -> asyncio.Future[Any]:
        """Queue one record; returns once it is queued, with the future of its ack."""
        producer = self._producer()
        acked: asyncio.Future[Any] = await producer.send(
            topic, value, key=key, partition=partition, headers=list(headers) or None
        )
        unread = self._unread
        unread.append((topic, acked))
        if len(unread) >= self._read_at:
            self._read_answers()
        return acked

    @contextlib.asynccontextmanager
    async def batching(self) -> AsyncIterator[list[asyncio.Future[Any]]]:
        """Records `queue`d inside go to the producer when it ends (also by an error), one
        batch per topic and partition: aiokafka's `send` costs more per record than building
        the record into a batch does. Yields the list the batches' acks join as they are sent,
        whole once the outermost `batching` of the task has ended.

        Only for topic partitions that every record reaches through `queue` in this one task:
        a record sent to one by another path in the meantime would go ahead of those queued."""
        already = _OPEN_BATCHES.get()
        if already is not None:
            yield already.acks
            return
        open_batches = _OPEN_BATCHES.set(opened := _OpenBatches())
        try:
            yield opened.acks
        finally:
            _OPEN_BATCHES.reset(open_batches)
            for (topic, partition), batch in opened.batches.items():
                await self._send_batch(topic, partition, batch, opened.acks)

    async def queue(
        self, topic: str, key: bytes, value: bytes | None, partition: int, headers: Headers = ()
    ) -> None:
        """`send`, batched inside `batching`; the record is queued at once outside it."""
        opened = _OPEN_BATCHES.get()
        if opened is None:
            await self.send(topic, key, value, partition, headers)
            return
        batches = opened.batches
        batch = batches.get((topic, partition))
        if batch is None:
            batch = batches[topic, partition] = self._producer().create_batch()
        listed = list(headers)  # The batch builder takes a list only.
        if batch.append(key=key, value=value, timestamp=None, headers=listed) is None:  # Full.
            await self._send_batch(topic, partition, batch, opened.acks)
            batch = batches[topic, partition] = self._producer().create_batch()
            # A new batch always takes its first record.
            batch.append(key=key, value=value, timestamp=None, headers=listed)

    async def _send_batch(
        self, topic: str, partition: int, batch: Any, acks: list[asyncio.Future[Any]]
    ) -> None:
        if batch.record_count():
            batch.close()  # Nothing but `queue` adds to it (aiokafka's `send` could, if open).
            acked = await self._producer().send_batch(batch, topic, partition=partition)
            self._unread.append((topic, acked))
            acks.append(acked)

    def _producer(self) -> Any:
        producer = self._app.producer._producer  # aiokafka's, started with Faust's producer.
        if producer is None:
            # Faust's own error for it: the guard lets it through (not the message's fault).
            raise NotReady("the producer has not started")
        return producer

    async def put_queued(
        self, table: Any, key: str, value: bytes | None, partition: int, headers: Headers = ()
    ) -> None:
        """`table[key] = value` (None deletes the key) with its changelog record `queue`d.

        `partition` is the table partition the key lives in: the input partition it came from.
        The table changes at once and its record follows with the batch: a batch refused stops
        the worker before its inputs are committed, and the table is rebuilt from the changelog.
        `headers` ride on the changelog record for its other readers (Faust ignores them).
        """
        changelog = table.changelog_topic.get_topic_name()
        await self.queue(changelog, changelog_key(table, key), value, partition, headers)
        _set_in_memory(table, key, value)

    async def put_here(self, table: Any, key: str, value: bytes | None) -> None:
        """`put_queued` to the partition of the input being handled: where `table[key] = value`
        would write (Faust's tables live on their inputs' partitions)."""
        partition = PARTITION_IN_HAND.get()
        if partition is None:
            event = current_event()
            if event is None:
                raise RuntimeError(
                    f"{table.name}[{key!r}] written outside the handling of an input"
                )
            partition = event.message.partition
        await self.put_queued(table, key, value, partition)


def table_value(table: Any, key: str) -> bytes | None:
    """`table.get(key)`, read from the in-memory store's dict (Kairos' tables are all
    `memory://`, as `_set_in_memory` writes them). Faust's `get` calls its sensors and, for a
    key not there, raises and catches a KeyError, and the schedule stage asks mostly for keys
    that are not there (whether a scanner is held on a host that no schedule touches)."""
    value: bytes | None = table.data.data.get(key)
    return value


def _set_in_memory(table: Any, key: str, value: bytes | None) -> None:
    if value is None:
        table.data.pop(key, None)
    else:
        table.data[key] = value


def changelog_key(table: Any, key: str) -> bytes:
    """`key` as Faust writes it to `table`'s changelog: JSON for the str keys Kairos' tables
    declare, the bytes `json.dumps` gives, without going through Faust's codec registry for
    every record."""
    if table.key_serializer == "json":
        return json.dumps(key).encode()
    key_bytes, _ = table.changelog_topic.prepare_key(key, table.key_serializer)
    return bytes(key_bytes)
