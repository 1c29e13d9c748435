"""1. Kafka client ceiling: what aiokafka alone moves on this machine, 200-byte messages.

One producer publishes M messages to a 12-partition topic the way the load generators do
(acks=all, idempotent, linger 20 ms, send without awaiting each, then flush); then one
consumer reads them all back from the beginning. Rates are counted messages over wall
time. This is the ceiling every Python process in the other scenarios lives under.
"""

from __future__ import annotations

import os
import time
from typing import Any

from aiokafka import AIOKafkaConsumer

from bench.kafka_io import create_topics, send_all, start_producer
from bench.metrics import per_second
from bench.report import Figure, plot_panels
from bench.scenarios.common import Context, new_result

KEY, NUMBER, TITLE = "kafka", 1, "Kafka client ceiling"
SIZE = 200


async def run(ctx: Context, systems: set[str] | None = None) -> Any:
    m = ctx.size(quick=200_000, full=2_000_000)
    result = new_result(ctx, KEY, NUMBER, TITLE, messages=m, message_bytes=SIZE, partitions=12)
    settings = ctx.stack.settings("kafka")
    topic = f"{settings.topic_prefix}ceiling"
    await create_topics(settings, {topic: 12})
    payload = os.urandom(SIZE // 2).hex().encode()
    producer = await start_producer(settings)
    sent_at: list[tuple[float, int]] = []
    try:
        with ctx.ui.phase(f"producing {m:,} messages of {SIZE} B", total=m) as phase:
            started = time.time()

            def on_sent(count: int) -> None:
                sent_at.append((time.time() - started, count))
                phase.update(count)

            records = ((str(i).encode(), payload) for i in range(m))
            await send_all(producer, topic, records, on_sent=on_sent)
            produce_seconds = time.time() - started
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic, **settings.kafka_client_options(), group_id=None, auto_offset_reset="earliest",
        enable_auto_commit=False, max_poll_records=10_000, fetch_max_bytes=32 * 1024 * 1024,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )  # fmt: skip
    received: list[float] = []
    await consumer.start()
    try:
        with ctx.ui.phase(f"consuming {m:,} messages", total=m) as phase:
            started_consume = time.time()
            count = 0
            while count < m and time.time() - started_consume < 300:
                batches = await consumer.getmany(timeout_ms=500, max_records=10_000)
                now = time.time()
                for records in batches.values():
                    count += len(records)
                    received.extend([now] * len(records))
                phase.update(count)
            consume_seconds = time.time() - started_consume
    finally:
        await consumer.stop()
    produce_rate = m / produce_seconds
    consume_rate = count / consume_seconds
    result.details = {
        "produce": {"messages": m, "seconds": produce_seconds, "rate": produce_rate,
                    "MB_per_s": produce_rate * SIZE / 1e6},
        "consume": {"messages": count, "seconds": consume_seconds, "rate": consume_rate,
                    "MB_per_s": consume_rate * SIZE / 1e6},
    }  # fmt: skip
    result.figures.append(Figure(label="produce, msgs/s (acks=all, batched)", unit="/s",
                                 kairos=produce_rate, better="higher",
                                 target_text="— (reference)"))  # fmt: skip
    result.figures.append(Figure(label="consume, msgs/s (one consumer)", unit="/s",
                                 kairos=consume_rate, better="higher",
                                 target_text="— (reference)"))  # fmt: skip
    result.notes.append(
        "Not Kairos itself: the aiokafka client ceiling on this machine, to read the other "
        "figures against. The 'Kairos' column holds the client's figure."
    )
    consumed = per_second(received, origin=started_consume)
    produced_t = [t for t, _ in sent_at]
    produced_rate = [
        (b - a) / (tb - ta) if tb > ta else 0.0
        for (ta, a), (tb, b) in zip([(0.0, 0), *sent_at[:-1]], sent_at, strict=True)
    ]
    png = ctx.plot_path(KEY, "throughput")
    if plot_panels(png, {"producer": {"msgs/s": (produced_t, produced_rate)},
                         "consumer": {"msgs/s": (consumed["t"], consumed["count"])}},
                   "aiokafka, 200-byte messages", "msgs/s",
                   xlabel="seconds since the phase began"):  # fmt: skip
        result.plots.append(png.name)
    return result
