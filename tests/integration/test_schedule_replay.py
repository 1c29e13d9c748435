"""A schedule's work survives a worker killed half-way through an input.

A worker commits an input's offset only after its producer has flushed, so a `kill -9` leaves
some of an input's effects on the broker and none of the rest, and the next worker processes
the input again. The tests build such broken states on purpose, on a real broker, while the
worker is down:
- the host side's ledger (its changelog) says that the command's result, the next record of
  its partition, already ended the command, as a first pass would have left it had its report
  to the schedule never left the producer. When that record then reaches the restarted worker,
  it must report the end;
- a run is stored as started, with its tally of fan-outs, but its fan-out never left the
  producer. The restarted worker must send the fan-out again and finish the run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.internal import ReleaseOutcome
from streams import codec
from streams.partition_index import partition_of
from streams.policy.fanout import PendingFanOuts, fanned_out
from streams.policy.schedule_commands import CommandEntry, marked_ended, origin_of
from streams.policy.schedules import decide_schedule
from streams.topology import SCHEDULE_COMMANDS, SCHEDULE_FANOUTS, SCHEDULES
from tests.support.factories import scan_result, schedule_triggered
from tests.support.kafka import wait_until
from tests.support.schedules import schedule_harness

ON_DEMAND = {"kind": "none"}


async def read_whole(settings: Any, topic: str) -> list[Any]:
    """Every record on `topic` up to its current end."""
    consumer = AIOKafkaConsumer(**settings.kafka_client_options(), group_id=None)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        records: list[Any] = []

        async def behind() -> bool:
            return any([await consumer.position(tp) < end for tp, end in ends.items()])

        while await behind():
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(batch)
        return records
    finally:
        await consumer.stop()


async def end_offset(settings: Any, partition: TopicPartition) -> int:
    consumer = AIOKafkaConsumer(**settings.kafka_client_options(), group_id=None)
    await consumer.start()
    try:
        return int((await consumer.end_offsets([partition]))[partition])
    finally:
        await consumer.stop()


async def test_a_result_replayed_after_its_report_was_lost_ends_the_run(
    make_settings, workers, broker_kind: str
) -> None:
    if broker_kind == "tansu":
        pytest.skip("a restarted worker takes ~30 s to rejoin its group on tansu")
    settings = make_settings()
    worker = workers(settings)
    names = settings.topics
    ledger = SCHEDULE_COMMANDS.changelog(settings)

    # Agents that take the commands and stay silent: the result is sent by hand, later.
    async with schedule_harness(settings, answer=lambda command: False) as bench:
        await bench.add_hosts("replayed-1")
        await bench.upsert("replayed", recurrence=ON_DEMAND, targets={"object_ids": ["replayed-1"]})
        await bench.wait_for_schedules("replayed")
        await bench.send_change(schedule_triggered("replayed"))

        def in_flight() -> bool:
            state = bench.log.state("replayed")
            return state is not None and bool(state.in_flight) and bool(bench.commands("replayed"))

        await wait_until(in_flight, timeout=30, what="the run's command in flight")
        (command,) = bench.commands("replayed")
        worker.stop()  # Offsets and tables flushed: the worker has seen no result.

        # The result will be the next record of its partition: that record is what the
        # ledger says ended the command, as a first pass killed before its report left the
        # producer would have left it (the entry marked ended, the host no longer busy).
        partition = partition_of(command["host_id"], settings.partitions)
        replayed_at = origin_of(
            names.scan_completed,
            partition,
            await end_offset(settings, TopicPartition(names.scan_completed, partition)),
        )
        records = await read_whole(settings, ledger)
        (entry_record,) = [r for r in records if command["command_id"].encode() in r.key]
        (busy_record,) = [r for r in records if b"busy:replayed-1/" in r.key]
        entry = CommandEntry.model_validate_json(entry_record.value)
        marked = marked_ended(entry, ReleaseOutcome.COMPLETED, None, replayed_at)
        await bench.producer.send_and_wait(
            ledger,
            marked.model_dump_json().encode(),
            key=entry_record.key,
            partition=entry_record.partition,
        )
        await bench.producer.send_and_wait(
            ledger, None, key=busy_record.key, partition=busy_record.partition
        )

        workers(settings)
        sent = await bench.producer.send_and_wait(
            names.scan_completed,
            codec.encode(scan_result(command)),
            key=command["host_id"].encode(),
        )
        assert origin_of(sent.topic, sent.partition, sent.offset) == replayed_at

        def concluded() -> bool:
            state = bench.log.state("replayed")
            return state is not None and not state.in_flight and state.last_success_at is not None

        await wait_until(concluded, timeout=60, what="the run to end on the replayed result")
        # The host is free for the scanner again: the next run reaches it.
        await bench.send_change(schedule_triggered("replayed"))
        # The restarted dispatcher sends its in-flight command again (same id); the next run
        # is the next distinct id.
        await wait_until(
            lambda: len(distinct(bench.commands("replayed"))) == 2,
            timeout=30,
            what="the next run's command",
        )

    final = bench.log.state("replayed")
    assert final is not None and final.failed_runs == 0
    first, second = distinct(bench.commands("replayed"))
    assert first["command_id"] != second["command_id"]
    assert second["host_id"] == "replayed-1"


def distinct(commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Commands in arrival order, each id once (agents dedupe re-sent ones the same way)."""
    seen: dict[str, dict[str, Any]] = {}
    for command in commands:
        seen.setdefault(command["command_id"], command)
    return list(seen.values())


async def test_a_fan_out_lost_after_its_run_was_stored_is_sent_again_on_restart(
    make_settings, workers, broker_kind: str
) -> None:
    """A worker killed after storing a started run but before its fan-out left the producer:
    built on purpose while the worker is down (the run and its tally written to the changelogs,
    no fan-out sent). The restarted worker must send the fan-out again and finish the run."""
    if broker_kind == "tansu":
        pytest.skip("a restarted worker takes ~30 s to rejoin its group on tansu")
    settings = make_settings()
    worker = workers(settings)
    async with schedule_harness(settings) as bench:
        await bench.add_hosts("lost-1")
        await bench.upsert("lost", recurrence=ON_DEMAND, targets={"object_ids": ["lost-1"]})
        await bench.wait_for_schedules("lost")
        await wait_until(
            lambda: bench.fleet.commands_for("lost-1"), timeout=30, what="the host's first scan"
        )
        worker.stop()

        stored = bench.log.state("lost")
        assert stored is not None
        decision = decide_schedule(stored, schedule_triggered("lost"), now=datetime.now(UTC))
        (run,) = decision.runs
        assert decision.state is not None and run.tracked
        partition = partition_of("lost", settings.partitions)
        key = json.dumps("lost").encode()
        await bench.producer.send_and_wait(
            SCHEDULES.changelog(settings),
            decision.state.model_dump_json(exclude_none=True).encode(),
            key=key,
            partition=partition,
        )
        pending = fanned_out(PendingFanOuts(), run, expected=1)
        await bench.producer.send_and_wait(
            SCHEDULE_FANOUTS.changelog(settings),
            pending.model_dump_json(exclude_none=True).encode(),
            key=key,
            partition=partition,
        )

        workers(settings)

        def concluded() -> bool:
            state = bench.log.state("lost")
            return state is not None and not state.in_flight and state.last_success_at is not None

        await wait_until(concluded, timeout=60, what="the run to end after its fan-out was lost")
    (command,) = bench.commands("lost")
    assert command["host_id"] == "lost-1"
    assert datetime.fromisoformat(command["due_at"]) == run.due_at
