"""The worker's consumer: Faust's aiokafka consumer, rewinding, fetching promptly, and handing
the host-keyed inputs over in batches.

It rewinds a batch Faust is about to drop (`streams.recovery.RewindingConsumer`), and it asks
the broker to hold a fetch for at most `FETCH_MAX_WAIT_MS`, not the 1,500 ms faust-streaming
0.15.3 writes into its worker consumer. aiokafka keeps one fetch request in flight per broker,
for the partitions with nothing buffered: a partition whose records the agents have just
handled joins only the next request. When the request in flight asks only for partitions
with no new records, the broker holds it for the whole wait, and the partition that was
drained waits with it — the dispatch queue, or a host partition with claims to make. In
`bench steady --quick` that showed as one to two seconds with almost no command issued, then
a burst (bench/README.md, "A fetch held for 1.5 s"). An idle worker pays for it with ten
empty fetch requests per second to each broker.

Records of the topics a `BatchInputs` names do not go through Faust's conductor, agent queue
and stream, a pass that costs more than handling the record (PERF-NOTES, "Per-operation
costs"). Each fetch's records of those topics are handed to `BatchInputs.handle_batch` in
fetch order (each partition's in its offset order), in the consumer's own loop, so the next
fetch waits for them as it waits for a full agent queue. Faust's bookkeeping stays as it was:
a record is acknowledged once handled, so the offset Faust commits (after flushing the
producer) never passes a record whose output is not acknowledged by the broker; a record
counts as unacknowledged while it is handled, so a rebalance waits for it; and when the flow
stops or the generation changes (a rebalance), the rest of the batch is left unacknowledged,
to be read again from the committed offset by whichever worker owns its partition then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.types import TP, Message

from streams.guard import INFRASTRUCTURE_ERRORS
from streams.recovery import RewindingConsumer

log = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS = 100
BATCH_MAX_RECORDS = 1000
"""A fetch can bring tens of thousands of records; handling them a thousand at a time keeps
the worker's memory near what Faust's agent queues held (measured: a whole fetch at once added
about 470 B per host to the worker's RSS in `bench memory --quick`)."""
RETRY_PAUSE_SECONDS = 1.0
"""A record whose handling failed for the broker's or the runtime's sake waits this long
before it is handled again (the guard parks only failures that are the record's fault)."""


class BatchInputs(Protocol):
    """A stage that takes the records of its topics a fetch at a time."""

    topics: frozenset[str]

    async def handle_batch(self, records: Sequence[Message], still_ours: Callable[[], bool]) -> int:
        """Handle `records` in order; stop early once `still_ours()` is False.

        Returns how many records, from the first, were handled: only those are acknowledged.
        """


class PromptConsumerThread(AIOKafkaConsumerThread):
    """Faust's consumer thread with the broker's hold on a fetch cut to `FETCH_MAX_WAIT_MS`."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # Read by `start()`, which builds the fetcher: set before the consumer starts.
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer


class WorkerConsumer(RewindingConsumer):
    """The consumer of every Kairos worker (see the module)."""

    batch_inputs: BatchInputs | None = None
    """Set by `use_worker_consumer`; None: every record goes through Faust's agents."""

    def _new_consumer_thread(self) -> PromptConsumerThread:
        return PromptConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        inputs = self.batch_inputs
        if inputs is None:
            async for pair in super().getmany(timeout):
                yield pair
            return
        topics = inputs.topics
        generation = self.app.consumer_generation_id
        batch: list[Message] = []
        async for tp, message in super().getmany(timeout):
            if tp.topic in topics:
                batch.append(message)
                if len(batch) >= BATCH_MAX_RECORDS:
                    await self._handle_batch(inputs, batch, generation)
                    batch = []
            else:
                yield tp, message  # Faust's way: the dispatch queue, changelogs.
        if batch:
            await self._handle_batch(inputs, batch, generation)

    async def _handle_batch(
        self, inputs: BatchInputs, fetched: list[Message], generation: int
    ) -> None:
        """What Faust's drain loop does around each record, done around a batch of them."""
        records = []
        read_offset = self._read_offset
        for message in fetched:
            # As Faust's drain loop: drop what lies below the offset last read (a re-fetch),
            # and note a gap in the offsets, or the committed offset would stop before it.
            tp, offset = message.tp, message.offset
            last = read_offset[tp]
            if last is None or offset >= last:
                if last and offset - last > 1:
                    await self._add_gap(tp, last + 1, offset)
                records.append(message)
                read_offset[tp] = offset
        unacked = self._unacked_messages
        unacked.update(records)

        def still_ours() -> bool:
            return self.flow_active and self.app.consumer_generation_id == generation

        handled = 0
        try:
            while handled < len(records) and still_ours():
                try:
                    handled += await inputs.handle_batch(records[handled:], still_ours)
                except INFRASTRUCTURE_ERRORS as error:
                    # Handled again from the batch's first unacknowledged record: those before
                    # the failing one come again as a replay does, and are absorbed the same
                    # way (inputs dedupe by event id, commands have deterministic ids).
                    log.warning(
                        "handling records failed (%s: %s); trying again in %.0f s",
                        type(error).__name__,
                        error,
                        RETRY_PAUSE_SECONDS,
                    )
                    await asyncio.sleep(RETRY_PAUSE_SECONDS)
        finally:
            for message in records[:handled]:
                self.ack(message)
            # The rest is read again: a flow that stops or a new generation means a rebalance,
            # and recovery seeks every input partition to its committed offset.
            unacked.difference_update(records[handled:])
        commit_every = self._commit_every
        if commit_every is not None and self._n_acked >= commit_every:
            self._n_acked = 0
            await self.commit()


def use_worker_consumer(app: Any, batch_inputs: BatchInputs | None = None) -> None:
    """Use `WorkerConsumer` for `app`, handing `batch_inputs` its topics' records; call
    before anything starts the consumer."""

    class BoundWorkerConsumer(WorkerConsumer):
        pass

    BoundWorkerConsumer.batch_inputs = batch_inputs
    app.transport.Consumer = BoundWorkerConsumer


__all__ = ["FETCH_MAX_WAIT_MS", "BatchInputs", "WorkerConsumer", "use_worker_consumer"]
