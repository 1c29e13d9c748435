"""The worker's consumer: Faust's aiokafka consumer, rewinding and fetching promptly.

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
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from streams.recovery import RewindingConsumer

FETCH_MAX_WAIT_MS = 100


class PromptConsumerThread(AIOKafkaConsumerThread):
    """Faust's consumer thread with the broker's hold on a fetch cut to `FETCH_MAX_WAIT_MS`."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # Read by `start()`, which builds the fetcher: set before the consumer starts.
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer


class WorkerConsumer(RewindingConsumer):
    """The consumer of every Kairos worker (see the module)."""

    def _new_consumer_thread(self) -> PromptConsumerThread:
        return PromptConsumerThread(self, loop=self.loop, beacon=self.beacon)


def use_worker_consumer(app: Any) -> None:
    """Use `WorkerConsumer` for `app`; call before anything starts the consumer."""
    app.transport.Consumer = WorkerConsumer
