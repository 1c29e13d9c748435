"""Baseline: a bare heapq dispatcher on aiokafka, without Faust, tables or changelogs.

`python -m bench.baselines.heapq_dispatch --bootstrap B --prefix P --group G ...`

It reads `P`object-created and `P`scan-completed, keeps every host's next due time in a
dict plus a heap, and every tick emits a ScanCommand for each host that is due (under a
global cap). A host's first scan is due at `occurred_at + spread offset` (the same offset
function Kairos uses), later ones at `completed_at + interval(score)` by Kairos' rules.
Its state lives only in memory: after a crash it re-reads both topics from the start.
Offsets are committed to group G so the harness can tell when it has caught up.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import time
from datetime import datetime

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.baselines.common import command_id, now, say, scan_command, start_producer
from schemas.base import ComplianceState
from schemas.config import SchedulerConfig
from streams.policy.ids import spread_offset_seconds

CONFIG = SchedulerConfig()
REPORT_SECONDS = 0.05
"""Progress is reported at most this often: the throughput scenario takes its rate from these
reports, and at its quick scale all results are applied in about a third of a second."""

# Same thresholds as streams.policy.compliance, on the raw JSON (no pydantic in the loop).
_RULES = (
    (100, ComplianceState.COMPLIANT),
    (80, ComplianceState.MOSTLY_COMPLIANT),
    (50, ComplianceState.PARTIAL),
    (20, ComplianceState.LOW),
)


def state_of(result: dict) -> ComplianceState:
    if result.get("status") != "succeeded":
        return ComplianceState.UNKNOWN
    if result.get("severity_critical_failed") or result.get("severity_high_failed"):
        return ComplianceState.CRITICAL
    score = result.get("score")
    if score is None:
        return ComplianceState.UNKNOWN
    for threshold, state in _RULES:
        if score >= threshold:
            return state
    return ComplianceState.CRITICAL


class HeapDispatcher:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        # host -> [next_due epoch, due instance, command id in flight or None, priority, state]
        self.hosts: dict[str, list] = {}
        self.heap: list[tuple[float, str]] = []
        self.in_flight = 0
        self.issued = 0
        self.created = 0
        self.results = 0

    def on_created(self, event: dict) -> None:
        host = event["object_id"]
        if event.get("object_type") != "host" or host in self.hosts:
            return
        if event.get("operation") == "deleted":
            return
        base = datetime.fromisoformat(event["occurred_at"]).timestamp()
        due = base + spread_offset_seconds(host, self.args.spread_seconds)
        self.hosts[host] = [due, 1, None, 10, "unknown"]
        self.created += 1
        heapq.heappush(self.heap, (due, host))

    def on_result(self, result: dict) -> None:
        host = result["host_id"]
        entry = self.hosts.get(host)
        if entry is None:
            return
        # Live: the command in flight. Replaying after a crash nothing is in flight, so a
        # result counts when it answers the command of the host's current due instance.
        expected = entry[2] if entry[2] is not None else command_id(host, entry[1])
        if result["command_id"] != expected:
            return
        if entry[2] is None:
            self.in_flight += 1  # balanced just below
        entry[2] = None
        self.in_flight -= 1
        self.results += 1
        completed = datetime.fromisoformat(result["completed_at"]).timestamp()
        entry[1] += 1  # the next command (scheduled or retry) gets a new id
        if result.get("status") == "succeeded":
            state = state_of(result)
            minutes = min(CONFIG.interval_minutes(state), CONFIG.max_interval_minutes)
            entry[0] = completed + minutes * 60
            entry[3] = CONFIG.priority(state)
            entry[4] = state.value
        else:
            entry[0] = time.time() + CONFIG.retry_delay_seconds
        heapq.heappush(self.heap, (entry[0], result["host_id"]))

    async def tick(self, producer, topic: str) -> None:
        wall = time.time()
        issued_at = now()
        while self.heap and self.heap[0][0] <= wall and self.in_flight < self.args.cap:
            due, host = heapq.heappop(self.heap)
            entry = self.hosts.get(host)
            if entry is None or entry[0] != due or entry[2] is not None:
                continue
            command = scan_command(
                host,
                entry[1],
                due_at=datetime.fromtimestamp(due, issued_at.tzinfo),
                issued_at=issued_at,
                priority=entry[3],
                state=entry[4],
            )
            entry[2] = json.loads(command)["command_id"]
            self.in_flight += 1
            self.issued += 1
            await producer.send(topic, command, key=host.encode())


async def run(args: argparse.Namespace) -> None:
    prefix = args.prefix
    created, completed = f"{prefix}object-created", f"{prefix}scan-completed"
    commands = f"{prefix}scan-commands"
    dispatcher = HeapDispatcher(args)
    producer = await start_producer(args.bootstrap)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        enable_auto_commit=False,
        max_poll_records=5000,
    )
    await consumer.start()
    try:
        partitions = []
        for topic in (created, completed):
            for _ in range(100):
                found = consumer.partitions_for_topic(topic)
                if found:
                    break
                await consumer._client.force_metadata_update()  # noqa: SLF001
                await asyncio.sleep(0.1)
            partitions += [TopicPartition(topic, p) for p in sorted(found or ())]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        # Rebuild first: every host known before results are applied to it.
        created_ends = await consumer.end_offsets([p for p in partitions if p.topic == created])
        pending_results: list[dict] = []

        async def behind() -> bool:
            for partition, end in created_ends.items():
                if await consumer.position(partition) < end:
                    return True
            return False

        while await behind():
            batches = await consumer.getmany(timeout_ms=200)
            for partition, records in batches.items():
                for record in records:
                    value = json.loads(record.value)
                    if partition.topic == created:
                        dispatcher.on_created(value)
                    else:
                        pending_results.append(value)
        for result in pending_results:
            dispatcher.on_result(result)
        say(f"heapq ready: {len(dispatcher.hosts)} hosts rebuilt")
        last_commit = time.monotonic()
        next_tick = time.monotonic()
        last_report: tuple[int, int, int] = (-1, -1, -1)
        next_report = 0.0
        while True:
            timeout = max(0, int((next_tick - time.monotonic()) * 1000))
            batches = await consumer.getmany(timeout_ms=timeout)
            for partition, records in batches.items():
                handle = dispatcher.on_created if partition.topic == created else None
                for record in records:
                    value = json.loads(record.value)
                    (handle or dispatcher.on_result)(value)
            if time.monotonic() >= next_tick:
                await dispatcher.tick(producer, commands)
                next_tick = time.monotonic() + args.tick_seconds
            counts = (dispatcher.created, dispatcher.results, dispatcher.issued)
            if counts != last_report and time.monotonic() >= next_report:
                say(
                    f"progress t={time.time():.3f} created={counts[0]} results={counts[1]} "
                    f"issued={counts[2]}"
                )
                last_report, next_report = counts, time.monotonic() + REPORT_SECONDS
            if time.monotonic() - last_commit >= 1.0:
                await consumer.commit()
                last_commit = time.monotonic()
    finally:
        await consumer.stop()
        await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--spread-seconds", type=int, default=0)
    parser.add_argument("--cap", type=int, default=100_000)
    parser.add_argument("--tick-seconds", type=float, default=0.1)
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
