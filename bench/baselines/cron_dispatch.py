"""Baselines for cron schedules: APScheduler 3 CronTrigger jobs, or a heapq over croniter.

`python -m bench.baselines.cron_dispatch --engine apscheduler|heapq --plan F --topic T ...`

The plan file is JSON: {"schedules": [[schedule_id, host_id], ...], "expression": "...",
"start": epoch, "end": epoch, "fleet": {"at": epoch, "hosts": [...]} | null}. Every
schedule fires `expression` (croniter's order, seconds last) from `start` up to `end` and
each occurrence produces one ScanCommand for its host, with `due_at` = the occurrence the
engine itself scheduled and `issued_at` = when the command was handed to the producer.
`fleet`, when given, is one more job at `at` that sends one command to every listed host.

- apscheduler: AsyncIOScheduler + SQLAlchemyJobStore on PostgreSQL (`--dsn`), one job per
  schedule with a CronTrigger; the occurrence is APScheduler's own scheduled run time (from
  its EVENT_JOB_SUBMITTED event). Late jobs still run (misfire_grace_time=None).
- heapq: every schedule's next fire time in one heap; the next time comes from croniter
  (one parsed expression, copied per schedule as Kairos does). Memory only, no store.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import heapq
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer
from croniter import croniter

from bench.baselines.common import now, say, scan_command, start_producer

SCHEDULE_SCANNER = "nmap"
FLEET_SCANNER = "nuclei"
FLEET_ID = "fleet"


class Emitter:
    """Sends the commands and counts them; one producer, never awaited per command."""

    def __init__(self, producer: AIOKafkaProducer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.sent = 0

    async def command(self, schedule_id: str, host_id: str, due: datetime, scanner: str) -> None:
        value = scan_command(
            host_id,
            int(due.timestamp()),
            due_at=due,
            issued_at=now(),
            priority=5,
            schedule_id=schedule_id,
            scanner=scanner,
        )
        await self.producer.send(self.topic, value, key=host_id.encode())
        self.sent += 1


# --- APScheduler ------------------------------------------------------------------------

_emitter: Emitter | None = None
_scheduled: dict[str, datetime] = {}


async def fire(schedule_id: str, host_id: str) -> None:
    """The cron job: one command for this schedule's host, due at the scheduled run time."""
    assert _emitter is not None
    due = _scheduled.pop(schedule_id)
    await _emitter.command(schedule_id, host_id, due, SCHEDULE_SCANNER)


async def fire_fleet(hosts: list[str]) -> None:
    """The one-off job of part (b): a command for every host."""
    assert _emitter is not None
    due = _scheduled.pop(FLEET_ID)
    for host in hosts:
        await _emitter.command(FLEET_ID, host, due, FLEET_SCANNER)


def on_submitted(event: Any) -> None:
    # Dispatched after the executor created the job's task and before the task runs.
    _scheduled[event.job_id] = event.scheduled_run_times[-1]


async def run_apscheduler(args: argparse.Namespace, plan: dict[str, Any], emitter: Emitter) -> Any:
    from apscheduler.events import EVENT_JOB_SUBMITTED
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.asyncio import AsyncIOScheduler
    from apscheduler.triggers.cron import CronTrigger
    from apscheduler.triggers.date import DateTrigger

    global _emitter
    _emitter = emitter
    url = args.dsn.replace("postgresql://", "postgresql+psycopg://", 1)
    scheduler = AsyncIOScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=url)},
        job_defaults={"misfire_grace_time": None, "coalesce": True, "max_instances": 1},
        timezone=UTC,
    )
    scheduler.add_listener(on_submitted, EVENT_JOB_SUBMITTED)
    scheduler.start(paused=True)
    minute, hour, day, month, day_of_week, second = plan["expression"].split()
    start = datetime.fromtimestamp(plan["start"], UTC)
    end = datetime.fromtimestamp(plan["end"], UTC)
    began = time.monotonic()
    for schedule_id, host_id in plan["schedules"]:
        trigger = CronTrigger(second=second, minute=minute, hour=hour, day=day, month=month,
                              day_of_week=day_of_week, start_date=start, end_date=end,
                              timezone=UTC)  # fmt: skip
        scheduler.add_job(fire, trigger, args=[schedule_id, host_id], id=schedule_id,
                          name=schedule_id)  # fmt: skip
    fleet = plan.get("fleet")
    if fleet:
        at = datetime.fromtimestamp(fleet["at"], UTC)
        scheduler.add_job(fire_fleet, DateTrigger(at, timezone=UTC), args=[fleet["hosts"]],
                          id=FLEET_ID, name=FLEET_ID)  # fmt: skip
    say(f"added {len(plan['schedules'])} jobs in {time.monotonic() - began:.2f} s")
    scheduler.resume()
    return scheduler


# --- heapq + croniter -------------------------------------------------------------------


async def run_heapq(plan: dict[str, Any], emitter: Emitter) -> None:
    parsed = croniter(plan["expression"], datetime.fromtimestamp(plan["start"], UTC))
    start = datetime.fromtimestamp(plan["start"] - 1, UTC)
    end = plan["end"]

    def next_after(instant: datetime) -> float:
        walker = copy.copy(parsed)
        walker.set_current(instant, force=True)
        return float(walker.get_next(float))

    heap: list[tuple[float, int]] = []
    schedules = plan["schedules"]
    for index in range(len(schedules)):
        heapq.heappush(heap, (next_after(start), index))
    fleet = plan.get("fleet")
    if fleet:
        heapq.heappush(heap, (fleet["at"], -1))
    say(f"heap of {len(heap)} entries built")
    while heap:
        delay = heap[0][0] - time.time()
        if delay > 0:
            await asyncio.sleep(min(delay, 1.0))
            continue
        wall = time.time()
        while heap and heap[0][0] <= wall:
            fire_at, index = heapq.heappop(heap)
            due = datetime.fromtimestamp(fire_at, UTC)
            if index < 0:
                for host in fleet["hosts"]:
                    await emitter.command(FLEET_ID, host, due, FLEET_SCANNER)
                continue
            schedule_id, host_id = schedules[index]
            await emitter.command(schedule_id, host_id, due, SCHEDULE_SCANNER)
            following = next_after(due)
            if following <= end:
                heapq.heappush(heap, (following, index))


async def run(args: argparse.Namespace) -> None:
    with open(args.plan) as source:
        plan = json.load(source)
    producer = await start_producer(args.bootstrap)
    emitter = Emitter(producer, args.topic)
    scheduler = None
    task = None
    try:
        if args.engine == "apscheduler":
            scheduler = await run_apscheduler(args, plan, emitter)
        else:
            task = asyncio.create_task(run_heapq(plan, emitter))
        say(f"cron baseline ready at {time.time():.3f}")
        while True:
            await asyncio.sleep(1.0)
            await producer.flush()
            if task is not None and task.done():
                task.result()  # surfaces an error in the loop
            say(f"sent {emitter.sent}")
    finally:
        if scheduler is not None:
            scheduler.shutdown(wait=False)
        await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", choices=("apscheduler", "heapq"), required=True)
    parser.add_argument("--dsn", default="")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--plan", required=True)
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
