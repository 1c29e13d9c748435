"""The worker's consumer: Faust's aiokafka consumer, rewinding, fetching promptly, and handing
the host-keyed inputs over in batches.

It rewinds a batch Faust is about to drop (`streams.recovery.RewindingConsumer`), and it asks
the broker to hold a fetch for at most `FETCH_MAX_WAIT_MS`, not the 1,500 ms faust-streaming
0.15.3 writes into its worker consumer. aiokafka keeps one fetch request in flight per broker,
for the partitions with nothing buffered: a partition whose records the agents have just
handled joins only the next request. When the request in flight asks only for partitions
with no new records, the broker holds it for the whole wait, and the partition that was
drained waits with it — the dispatch queue, or a host partition with claims to make: seconds
with almost no command issued, then a burst. An idle worker pays for the shorter wait with
more empty fetch requests to each broker.

Records of the topics a `BatchInputs` names do not go through Faust's conductor, agent queue
and stream, a pass that costs more than handling the record. They are handed to
`BatchInputs.handle_batch` in fetch order (each partition's in its offset order), in the
consumer's own loop, at most `BATCH_MAX_RECORDS` at a time and for at most `SLICE_SECONDS`
per call. A fetch not worked through in its slice is continued by the next
calls, and each of those first fetches the partitions Faust's agents read (not the inputs), so
the dispatcher sees the claims of the last slice while a backlog of inputs lasts. Handled in
one go, a fetch of 100,000 due hosts held every command back until its end. A stage may also
end a slice early (`handed_over`): after a schedule due pass, whose claims the dispatcher
should see before the next pass of the same tick runs; the slice after it is short, so those
claims, fetched meanwhile, are not held behind a slice of other inputs.
Faust's bookkeeping stays as it was: a record is acknowledged once handled, so the offset Faust
commits (after flushing the producer) never passes a record whose output is not acknowledged
by the broker; a record counts as unacknowledged while it is handled, so a rebalance waits for
it; and when the flow stops or the generation changes (a rebalance), the rest of the fetch is
forgotten, to be read again from the committed offset by whichever worker owns its partition
then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.types import TP, Message

from streams.direct import DirectSends, SendRefused
from streams.guard import INFRASTRUCTURE_ERRORS
from streams.recovery import RewindingConsumer

log = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS = 100
BATCH_MAX_RECORDS = 1000
"""A fetch can bring tens of thousands of records; handling them a thousand at a time keeps
the worker's memory near what Faust's agent queues held (measured: a whole fetch at once added
about 470 B per host to the worker's RSS in `bench memory --quick`)."""
SLICE_SECONDS = 0.5
"""How long one call of the consumer works on input records before Faust's agents get the
records fetched meanwhile (the dispatcher's queue among them). Shorter slices cost results/s:
at 0.1 s, 4,280/s against 5,420/s for whole fetches in `bench throughput --scale 20000`; at
0.5 s the two were within this machine's noise."""
SLICE_AFTER_HAND_OVER_SECONDS = 0.1
"""The slice that follows a stage's hand-over (`BatchInputs.handed_over`) ends this soon, so
the dispatcher's records, fetched meanwhile, come next. Whole, such a slice held the claims of
a cron minute's last due pass 0.45–0.85 s behind the fan-out replies (`bench cron --quick`)."""
RETRY_PAUSE_SECONDS = 1.0
"""A record whose handling failed for the broker's or the runtime's sake waits this long
before it is handled again (the guard parks only failures that are the record's fault)."""


class BatchInputs(Protocol):
    """A stage that takes the records of its topics a fetch at a time."""

    topics: frozenset[str]

    async def handle_batch(self, records: Sequence[Message], go_on: Callable[[], bool]) -> int:
        """Handle `records` in order; stop early, before a record, once `go_on()` is False.

        Returns how many records, from the first, were handled: only those are acknowledged.
        """

    def handed_over(self) -> bool:
        """The stage stopped early to end the slice now (a unit of work whose output waits for
        the dispatcher); asking resets it."""


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
    direct_sends: DirectSends | None = None
    """Set by `use_worker_consumer`: its refused records stop the commit (see `_commit`)."""

    def _new_consumer_thread(self) -> PromptConsumerThread:
        return PromptConsumerThread(self, loop=self.loop, beacon=self.beacon)

    _fetch: AsyncIterator[tuple[TP, Message]] | None = None
    """A fetch whose input records are not all handled yet: continued by the next calls."""
    _fetch_generation: int | None = None
    """The consumer generation `_fetch` was fetched in: known from its first record on."""
    _left: list[Message]
    """Records of `_fetch` taken out of it but not handled when the time was up."""
    _others_only = False
    """While True, `_getmany` asks for the partitions Faust's agents read, not the inputs."""
    _handed_over = False
    """A stage ended the last slice early: the next one is short."""

    async def _commit(self, offsets: Any) -> bool:
        # Faust has flushed the producer just before: every record sent for these offsets has
        # its answer. One refused (its retries spent) means what produced it is not done.
        sends = self.direct_sends
        if sends is not None:
            try:
                sends.raise_refused()
            except SendRefused as refused:
                log.error(
                    "%s: nothing more is committed and the worker stops; its inputs are "
                    "handled again from the last commit",
                    refused,
                )
                await self.crash(refused)
                return False
        committed: bool = await super()._commit(offsets)
        return committed

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        inputs = self.batch_inputs
        if inputs is None:
            async for pair in super().getmany(timeout):
                yield pair
            return
        if self._fetch is not None and not self._still_ours():
            await self._drop_fetch()
        if self._fetch is None:
            self._fetch = super().getmany(timeout)
            # Not the generation now: the fetch may wait out a rebalance before it fetches.
            self._fetch_generation = None
            self._left = []
        else:
            # The dispatch queue and the changelogs keep flowing while a backlog of inputs is
            # worked through, a slice per call: what was claimed a slice ago gets dispatched.
            self._others_only = True
            try:
                async for pair in super().getmany(0.0):
                    yield pair
            finally:
                self._others_only = False
            if not self._still_ours():
                await self._drop_fetch()
                return
        async for pair in self._work_through(inputs):
            yield pair

    async def _getmany(self, active_partitions: set[TP] | None, timeout: float) -> Any:
        # A copy, never Faust's own set: aiokafka reads the set it is given after waiting for
        # records, and a rebalance empties Faust's set meanwhile (it pauses every partition
        # for recovery). aiokafka reads an empty set as every partition, and Faust would drop
        # the records of the partitions it does not count active after aiokafka had moved
        # their positions past them.
        if active_partitions is None:
            return await super()._getmany(None, timeout)
        inputs = self.batch_inputs
        skipped = inputs.topics if self._others_only and inputs is not None else frozenset()
        requested = {tp for tp in active_partitions if tp.topic not in skipped}
        if not requested:
            return {}
        return await super()._getmany(requested, timeout)

    async def _work_through(self, inputs: BatchInputs) -> AsyncIterator[tuple[TP, Message]]:
        """Handle the unfinished fetch's input records for up to `SLICE_SECONDS`
        (`SLICE_AFTER_HAND_OVER_SECONDS` after a hand-over), yielding the others to Faust as
        they come; what is left waits for the next call."""
        fetch = self._fetch
        assert fetch is not None
        topics = inputs.topics
        clock = asyncio.get_running_loop().time
        batch, self._left = self._left, []
        slice_seconds = SLICE_AFTER_HAND_OVER_SECONDS if self._handed_over else SLICE_SECONDS
        self._handed_over = False
        deadline = clock() + slice_seconds if batch else None  # From the first record on.
        exhausted = False
        while True:
            while not exhausted and len(batch) < BATCH_MAX_RECORDS:
                try:
                    tp, message = await fetch.__anext__()
                except StopAsyncIteration:
                    exhausted = True
                    break
                if self._fetch_generation is None:
                    # Faust yields a fetch's records only in the generation it fetched them in.
                    self._fetch_generation = self.app.consumer_generation_id
                if tp.topic not in topics:
                    yield tp, message  # Faust's way: the dispatch queue, changelogs.
                elif await self._admit(message):
                    batch.append(message)
                    if deadline is None:
                        deadline = clock() + slice_seconds
            if batch:
                assert deadline is not None
                batch = await self._handle_batch(inputs, batch, deadline)
            if not self._still_ours():
                await self._drop_fetch()
                return
            if batch or exhausted or (deadline is not None and clock() >= deadline):
                break
        if exhausted and not batch:
            self._fetch = None
        else:
            self._left = batch

    async def _admit(self, message: Message) -> bool:
        """As Faust's drain loop does: drop what lies below the offset last read (a re-fetch),
        and note a gap in the offsets, or the committed offset would stop before it."""
        tp, offset = message.tp, message.offset
        last = self._read_offset[tp]
        if last is not None and offset < last:
            return False
        if last and offset - last > 1:
            await self._add_gap(tp, last + 1, offset)
        self._read_offset[tp] = offset
        return True

    def _still_ours(self) -> bool:
        return self.flow_active and self.app.consumer_generation_id == self._fetch_generation

    async def _drop_fetch(self) -> None:
        """Forget the unfinished fetch: its records are read again from the committed offset
        by whichever worker owns their partition after the rebalance."""
        fetch, self._fetch, self._left = self._fetch, None, []
        if fetch is not None:
            await fetch.aclose()  # type: ignore[attr-defined]

    async def _handle_batch(
        self, inputs: BatchInputs, records: list[Message], deadline: float
    ) -> list[Message]:
        """What Faust's drain loop does around each record, done around a batch of them.

        Returns the records left unhandled when the time was up, in order."""
        unacked = self._unacked_messages
        unacked.update(records)
        clock = asyncio.get_running_loop().time
        still_ours = self._still_ours

        def go_on() -> bool:
            return still_ours() and clock() < deadline

        handled = 0
        try:
            while handled < len(records) and go_on():
                try:
                    handled += await inputs.handle_batch(records[handled:], go_on)
                    if inputs.handed_over():
                        self._handed_over = True
                        break
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
            # The rest waits for the next call, unacknowledged; if the partitions are no longer
            # ours, it is forgotten and read again (see `_drop_fetch`).
            unacked.difference_update(records[handled:])
        commit_every = self._commit_every
        if commit_every is not None and self._n_acked >= commit_every:
            self._n_acked = 0
            await self.commit()
        return records[handled:]


def use_worker_consumer(
    app: Any, batch_inputs: BatchInputs | None = None, direct_sends: DirectSends | None = None
) -> None:
    """Use `WorkerConsumer` for `app`, handing `batch_inputs` its topics' records and
    committing only while `direct_sends` has had no record refused; call before anything
    starts the consumer."""

    class BoundWorkerConsumer(WorkerConsumer):
        pass

    BoundWorkerConsumer.batch_inputs = batch_inputs
    BoundWorkerConsumer.direct_sends = direct_sends
    app.transport.Consumer = BoundWorkerConsumer


__all__ = ["FETCH_MAX_WAIT_MS", "BatchInputs", "WorkerConsumer", "use_worker_consumer"]
