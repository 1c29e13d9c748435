"""Baseline: APScheduler 3.x, AsyncIOScheduler + SQLAlchemyJobStore on PostgreSQL.

`python -m bench.baselines.apscheduler_dispatch --dsn DSN --bootstrap B --topic T --plan F`

One job per host (an interval trigger of one day starting at the host's due time, as a
scan scheduler would register it). Each run produces a ScanCommand whose `due_at` is the
job's first run time. The plan file is JSON: {"hosts": [...], "due": [epoch seconds]}.
Jobs are added with the scheduler paused; it is resumed once all are stored. Late jobs
still run (misfire_grace_time=None), so lateness is measured rather than dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from bench.baselines.common import now, say, scan_command, start_producer

_producer: AIOKafkaProducer | None = None
_topic = ""
_fired = 0


async def fire(host_id: str, due_iso: str) -> None:
    """The job: emit this host's scan command."""
    global _fired
    assert _producer is not None
    value = scan_command(host_id, 1, due_at=datetime.fromisoformat(due_iso), issued_at=now())
    await _producer.send(_topic, value, key=host_id.encode())
    _fired += 1


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def sqlalchemy_url(dsn: str) -> str:
    return dsn.replace("postgresql://", "postgresql+psycopg://", 1)


async def run(args: argparse.Namespace) -> None:
    global _producer, _topic
    _topic = args.topic
    _producer = await start_producer(args.bootstrap)
    plan = json.loads(open(args.plan).read())
    scheduler = AsyncIOScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=sqlalchemy_url(args.dsn))},
        job_defaults={"misfire_grace_time": None, "coalesce": True, "max_instances": 1},
        timezone=UTC,
    )
    scheduler.start(paused=True)
    say(f"rss_before={rss_bytes()}")
    started = time.monotonic()
    for host, due in zip(plan["hosts"], plan["due"], strict=True):
        start = datetime.fromtimestamp(due, UTC)
        scheduler.add_job(
            fire,
            IntervalTrigger(days=1, start_date=start, timezone=UTC),
            args=[host, start.isoformat()],
            id=host,
            name=host,
        )
    say(f"apscheduler added {len(plan['hosts'])} jobs in {time.monotonic() - started:.2f} s")
    say(f"rss_after={rss_bytes()}")
    scheduler.resume()
    say(f"apscheduler ready at {time.time():.3f}")
    try:
        while True:
            await asyncio.sleep(1.0)
            await _producer.flush()
            say(f"fired {_fired}")
    finally:
        scheduler.shutdown(wait=False)
        await _producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--plan", required=True)
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
