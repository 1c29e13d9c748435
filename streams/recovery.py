"""Faust's table recovery with the hand-over to the agents in an order that loses nothing.

faust-streaming 0.15.3 ends recovery (`Recovery.on_recovery_completed`) by resuming the input
partitions while the fetcher is already running (it was started to read the changelogs), then
seeking them to their committed offsets, then resuming flow control, which clears every agent
queue. Records fetched during the seek's OffsetFetch round trips reach the queues and are cleared
unhandled. aiokafka's `seek_to_committed` moves only partitions whose committed offset is above
0 (aio-libs/aiokafka#1003), so a partition with no committed offset (or a committed 0) keeps its
position past the cleared records: they are never handled, and a freshly started worker can sit
idle on a topic full of waiting records.

`OrderedRecovery` owns the order: stop the flow first, so nothing reaches an agent; resume the
input partitions; seek every one of them explicitly, to its committed offset or to the beginning;
only then clear the queues and let records flow. A record that had reached a queue before the
stop lies past the committed offset (Faust commits only what agents acknowledged), so the seek
brings it back. Reading a record twice is harmless: inputs dedupe by `event_id`, and commands
carry deterministic ids.

`RewindingConsumer` closes a second gap, in the changelogs. Faust's `Consumer.getmany` drops a
batch that arrives after the flow stopped and rewinds only partitions with a committed offset.
A fetch that spans the start of a recovery (the flow stops at revocation, recovery seeks the
changelogs to where it reads from, and the fetch in flight returns records from there) loses
the changelog records it carried: changelogs have no committed offset, the consumer's position
is already past them, and recovery waits for them until the next rebalance. Seen when the owner
of the dispatch partition froze: the survivor read nothing of the partitions it took over until
the frozen worker came back. The consumer now rewinds every partition of such a batch to its
first record before Faust drops it.
"""

from __future__ import annotations

import asyncio
import logging
from time import monotonic
from typing import Any

from aiokafka import TopicPartition
from faust.tables.manager import TableManager
from faust.tables.recovery import Recovery
from faust.transport.drivers.aiokafka import Consumer
from faust.types import TP

log = logging.getLogger(__name__)


class OrderedRecovery(Recovery):
    """Recovery whose hand-over stops the flow, seeks every input partition, then resumes."""

    last_duration_seconds: float = 0.0

    async def on_recovery_completed(self, generation_id: int = 0) -> None:
        app: Any = self.app
        consumer = app.consumer
        log.info("Restore complete!")
        # Nothing reaches an agent from here until every input partition has been sought.
        consumer.stop_flow()
        app.flow_control.suspend()
        await app.on_rebalance_complete.send()
        self._set_recovery_ended()
        callbacks = [
            asyncio.ensure_future(
                table.on_recovery_completed(
                    self.actives_for_table[table], self.standbys_for_table[table]
                )
            )
            for table in self.tables.values()
        ]
        if callbacks:
            await asyncio.wait(callbacks)
        if app.consumer_generation_id != generation_id:
            log.warning(
                "recovery of generation %s superseded by generation %s",
                generation_id,
                app.consumer_generation_id,
            )
            return
        inputs = {tp for tp in consumer.assignment() if not self._is_changelog_tp(tp)}
        consumer.resume_partitions(inputs)
        if inputs:
            await self._wait(
                self._seek_inputs(consumer, inputs), timeout=app.conf.broker_request_timeout
            )
        if self._recovery_started_at is not None:
            self.last_duration_seconds = monotonic() - self._recovery_started_at
        self.completed.set()
        app.flow_control.resume()  # Clears the queues: what they held is re-read after the seek.
        consumer.resume_flow()
        await app._fetcher.maybe_start()
        self.tables.on_actives_ready()
        if not app.assignor.assigned_standbys():
            self.tables.on_standbys_ready()
        app.on_rebalance_end()
        log.info("Worker ready")

    async def _seek_inputs(self, consumer: Any, inputs: set[TP]) -> None:
        """Every input partition to its committed offset, or to its beginning if it has none."""
        committed = await consumer.seek_to_committed()  # Moves only offsets above 0.
        from_start = sorted(tp for tp in inputs if not committed.get(tp))
        if from_start:
            await consumer._thread.seek_to_beginning(
                *(TopicPartition(tp.topic, tp.partition) for tp in from_start)
            )
        # Faust drops fetched records below its last read offset: after the seek none may be.
        for tp in inputs:
            offset = committed.get(tp)
            consumer._read_offset[tp] = offset or None
            if offset:
                consumer._committed_offset[tp] = offset
        log.info(
            "input partitions sought: %d to committed offsets, %d to the beginning",
            len(inputs) - len(from_start),
            len(from_start),
        )


class OrderedTableManager(TableManager):
    """The table manager with `OrderedRecovery` in place of Faust's own."""

    @property
    def recovery(self) -> Recovery:
        if self._recovery is None:
            self._recovery = OrderedRecovery(self.app, self, beacon=self.beacon, loop=self.loop)
        return self._recovery


class RewindingConsumer(Consumer):
    """Faust's aiokafka consumer that rewinds a batch it is about to drop (see the module)."""

    async def _wait_next_records(self, timeout: float) -> tuple[Any, Any]:
        records, active_partitions = await super()._wait_next_records(timeout)
        if records and not self.flow_active:
            spans = {
                tp: (batch[0].offset, batch[-1].offset + 1)
                for tp, batch in records.items()
                if batch
            }
            thread: Any = self._thread
            rewound = await thread.call_thread(_rewind, thread._ensure_consumer(), spans)
            for tp in rewound:
                self._read_offset[tp] = spans[tp][0] or None
            if rewound:
                log.info(
                    "rewound %d partitions of a batch fetched as the flow stopped", len(rewound)
                )
            return {}, active_partitions
        return records, active_partitions


async def _rewind(consumer: Any, spans: dict[TP, tuple[int, int]]) -> list[TP]:
    """On the consumer's own thread: back to each batch's first offset, unless sought since.

    Recovery seeks through this thread too (Faust's `seek_wait`), so its seek cannot land
    between the check and the seek; a later one wins over the rewind, as it should.
    """
    assigned = consumer.assignment()
    rewound = []
    for tp, (first, after) in spans.items():
        if tp in assigned and await consumer.position(tp) == after:
            consumer.seek(tp, first)
            rewound.append(tp)
    return rewound
