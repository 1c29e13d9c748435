"""Baseline: the seed's SQL polling dispatcher, on the bench PostgreSQL.

`python -m bench.baselines.sql_poller --dsn DSN --bootstrap B --topic T --cycle 120 ...`

Every cycle it runs the seed's query, marks the rows it took (one UPDATE per row, sent
pipelined) and produces one ScanCommand per row with aiokafka, then sleeps `cycle`
seconds, as the seed's loop did. `--cycle 120` is the seed's setting; `--cycle 1` with a
large limit is its best case.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import psycopg

from bench.baselines.common import now, say, scan_command, start_producer

SCHEMA = """
CREATE TABLE IF NOT EXISTS host_schedule (
    host_id              text PRIMARY KEY,
    next_scheduled_scan  timestamptz,
    maintenance_mode     boolean NOT NULL DEFAULT false,
    scan_priority        integer NOT NULL DEFAULT 10,
    state                text NOT NULL DEFAULT 'unknown',
    due_instance         integer NOT NULL DEFAULT 1,
    in_flight_command_id text
);
CREATE INDEX IF NOT EXISTS host_schedule_dispatch_order
    ON host_schedule (scan_priority DESC, next_scheduled_scan ASC NULLS FIRST);
CREATE INDEX IF NOT EXISTS host_schedule_due ON host_schedule (next_scheduled_scan);
"""

DUE_QUERY = """
SELECT host_id, next_scheduled_scan, scan_priority, state, due_instance
FROM host_schedule
WHERE next_scheduled_scan <= now() AND NOT maintenance_mode
ORDER BY scan_priority DESC, next_scheduled_scan ASC NULLS FIRST
LIMIT %s
"""

MARK_TAKEN = """
UPDATE host_schedule
SET next_scheduled_scan = now() + interval '10 minutes',
    due_instance = due_instance + 1,
    in_flight_command_id = %s
WHERE host_id = %s
"""


async def run(args: argparse.Namespace) -> None:
    producer = await start_producer(args.bootstrap)
    conn = await psycopg.AsyncConnection.connect(args.dsn)
    say("sql poller ready")
    cycles = 0
    try:
        while args.max_cycles <= 0 or cycles < args.max_cycles:
            started = time.monotonic()
            async with conn.transaction():
                cursor = await conn.execute(DUE_QUERY, (args.limit,))
                rows = await cursor.fetchall()
                queried = time.monotonic() - started
                commands = []
                for host_id, due_at, priority, state, instance in rows:
                    commands.append((host_id, due_at, priority, state, instance))
                async with conn.cursor() as marks:
                    await marks.executemany(
                        MARK_TAKEN,
                        [(f"{host}/{instance}", host) for host, _, _, _, instance in commands],
                    )
            for host_id, due_at, priority, state, instance in commands:
                value = scan_command(
                    host_id,
                    instance,
                    due_at=due_at,
                    issued_at=now(),
                    priority=priority,
                    state=state,
                )
                await producer.send(args.topic, value, key=host_id.encode())
            await producer.flush()
            cycles += 1
            say(
                f"cycle {cycles}: {len(rows)} commands, query {queried:.3f} s, "
                f"total {time.monotonic() - started:.3f} s"
            )
            await asyncio.sleep(args.cycle)
        say("sql poller done")
        await asyncio.sleep(3600)
    finally:
        await conn.close()
        await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--cycle", type=float, default=120.0)
    parser.add_argument("--limit", type=int, default=100_000)
    parser.add_argument("--max-cycles", type=int, default=0, help="0 = forever")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
