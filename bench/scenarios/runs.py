"""One measured run per system: Kafka-fed systems (Kairos, heapq) and the SQL/APScheduler ones."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench.baselines.sql_poller import SCHEMA as SQL_SCHEMA
from bench.fleet import FleetProfile, ScannerFleet
from bench.kafka_io import CommandCollector, CommandLog, Offsets, create_topics, wait_until
from bench.metrics import ProcessSampler
from bench.scenarios.common import CAP, Context, due_stamp, prime
from bench.stack import ChildProcess, WorkerFailed, wait_ready
from bench.systems import System
from kairos.floor.settings import Settings

Plan = Callable[[float, list[str]], dict[str, float]]
IDLE_SECONDS = 15.0
"""After the last due time, stop waiting once no new planned command came for this long."""


@dataclass
class DispatchRun:
    """What one system did with one plan of due times."""

    label: str
    due_for: dict[str, float]
    log: CommandLog
    started_at: float  # the first planned due instant
    ended_at: float
    settled_at: float | None  # results of the priming round all applied
    lag_at_start: int | None
    prime_seconds: float
    samples: list[dict[str, Any]] = field(default_factory=list)
    events: dict[str, float] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def measured_from(self) -> float:
        if self.settled_at is None:
            return self.started_at
        return max(self.started_at, self.settled_at)


def cores_between(run: DispatchRun, start: float, end: float) -> dict[str, float | None]:
    """Cores each sampled process used between `start` and `end` (1.0 = one full core): the
    system's own, and the broker, PostgreSQL and the bench process, which every system shares
    (`BenchStack.shared_cpu_seconds`). None where fewer than two samples fall inside."""
    shares: dict[str, float | None] = {}
    names = {key[:-4] for sample in run.samples for key in sample if key.endswith("_cpu")}
    for name in sorted(names):
        key = f"{name}_cpu"
        inside = [s for s in run.samples if start <= s["at"] <= end and s.get(key) is not None]
        if len(inside) >= 2 and inside[-1]["at"] > inside[0]["at"]:
            used = inside[-1][key] - inside[0][key]
            shares[name] = used / (inside[-1]["at"] - inside[0]["at"])
        else:
            shares[name] = None
    return shares


def cores_note(label: str, cores: dict[str, float | None], when: str) -> str:
    """Where the machine's cores went: a system short of them falls behind its plan."""
    shared = {"broker": "Kafka broker", "postgres": "PostgreSQL", "bench": "bench process"}
    own = [name for name in cores if name not in shared]
    parts = [f"{shared.get(name, name)} {cores[name]:.2f}" for name in [*own, *shared]
             if cores.get(name) is not None]  # fmt: skip
    total = sum(value for value in cores.values() if value is not None)
    return (
        f"{label}: cores used {when}, of the machine's {os.cpu_count()}: {', '.join(parts)} "
        f"(total {total:.2f}; the bench process runs the scanner fleet and reads the commands)."
    )


async def kafka_dispatch_run(
    ctx: Context,
    system: System,
    n: int,
    plan: Plan,
    *,
    profile: FleetProfile,
    drain_seconds: float,
    kill_after: float | None = None,
    on_window: Callable[[CommandLog], None] | None = None,
) -> DispatchRun:
    """Prime `n` hosts, place their next due times by `plan(start, hosts)`, record commands.

    With `kill_after`, the first process is killed with SIGKILL that many seconds after the
    first due instant and a replacement is started at once.
    """
    try:
        return await _kafka_dispatch_run(
            ctx, system, n, plan, profile=profile, drain_seconds=drain_seconds,
            kill_after=kill_after, on_window=on_window,
        )  # fmt: skip
    finally:
        system.stop()


async def _kafka_dispatch_run(
    ctx: Context,
    system: System,
    n: int,
    plan: Plan,
    *,
    profile: FleetProfile,
    drain_seconds: float,
    kill_after: float | None,
    on_window: Callable[[CommandLog], None] | None,
) -> DispatchRun:
    await system.start(max_concurrent_scans=CAP)
    fleet = ScannerFleet(system.settings, profile)
    sampler = ProcessSampler(system.pids, interval=0.5, shared_cpu=ctx.stack.shared_cpu_seconds)
    events: dict[str, float] = {}
    async with fleet, sampler:
        primed = await prime(ctx, system, fleet, n)
        # Applying the released answers takes about half as long as priming did.
        lead = max(3.0, primed.seconds * 0.5) + 2.0
        start = time.time() + lead
        due_for = plan(start, primed.hosts)
        fleet.release(due_stamp(due_for), score=100, scan_seconds=0.0)
        events["released"] = time.time()
        settled_at, lag_at_start = await _settle_before(ctx, system, start)
        last_due = max(due_for.values())
        killer = None
        if kill_after is not None:
            killer = asyncio.create_task(_kill_and_restart(system, start + kill_after, events))
        wanted = set(due_for)

        def commanded() -> int:
            return sum(1 for host, due in _firsts(fleet.log, due_for) if host in wanted)

        with ctx.ui.phase(f"{system.label}: commands for planned due times", total=n) as phase:
            deadline = last_due + drain_seconds
            progress = (-1, time.time())
            while time.time() < deadline:
                done = commanded()
                phase.update(done, note=_window_note(start, last_due))
                restarted = killer is None or killer.done()
                if done >= n and restarted:
                    break
                now = time.time()
                if done != progress[0]:
                    progress = (done, now)
                quiet_since = max(progress[1], last_due, events.get("restart_ready", 0.0))
                if restarted and now - quiet_since > IDLE_SECONDS:
                    events["gave_up_idle"] = now  # the rest never came; no need to wait it out
                    break
                await asyncio.sleep(0.5)
        if killer is not None:
            if not killer.done():
                killer.cancel()
            await asyncio.gather(killer, return_exceptions=True)
        ended = time.time()
        if on_window:
            on_window(fleet.log)
    pids = system.pids()
    return DispatchRun(
        label=system.label,
        due_for=due_for,
        log=fleet.log,
        started_at=start,
        ended_at=ended,
        settled_at=settled_at,
        lag_at_start=lag_at_start,
        prime_seconds=primed.seconds,
        samples=sampler.samples,
        events=events,
        pids=pids,
    )


def _firsts(log: CommandLog, due_for: dict[str, float]) -> list[tuple[str, float]]:
    found: dict[str, float] = {}
    for host, due in zip(log.host_ids, log.due_at, strict=False):
        planned = due_for.get(host)
        if planned is not None and abs(due - planned) <= 0.5 and host not in found:
            found[host] = due
    return list(found.items())


def _window_note(start: float, last_due: float) -> str:
    now = time.time()
    if now < start:
        return f"due times start in {start - now:.0f} s"
    if now < last_due:
        return f"due window: {now - start:.0f}/{last_due - start:.0f} s"
    return f"draining, {now - last_due:.0f} s after the last due time"


async def _settle_before(ctx: Context, system: System, start: float) -> tuple[float | None, int]:
    """Wait until the released answers are all applied, or until `start` arrives."""
    last_lag = -1
    with ctx.ui.phase(f"{system.label}: applying the priming results") as phase:
        async with Offsets(system.settings) as offsets:
            while True:
                lag = await offsets.lag(system.group, system.input_topics())
                last_lag = lag
                phase.update(note=f"lag {lag:,}")
                if lag == 0:
                    return time.time(), 0
                if time.time() >= start:
                    return None, last_lag
                await asyncio.sleep(0.25)


async def _kill_and_restart(system: System, at: float, events: dict[str, float]) -> None:
    delay = at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
    victim = system.processes[0]
    events["killed"] = time.time()
    await asyncio.to_thread(victim.kill)
    events["kill_returned"] = time.time()
    events["restart_spawned"] = time.time()
    await system.start_worker()
    events["restart_ready"] = time.time()


# --- SQL polling dispatcher ------------------------------------------------------------


@dataclass
class ExternalRun:
    """A baseline that takes its schedule from PostgreSQL (SQL poller, APScheduler)."""

    label: str
    due_for: dict[str, float]
    log: CommandLog
    started_at: float
    ended_at: float
    settled_at: float | None
    details: dict[str, Any] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    events: dict[str, float] = field(default_factory=dict)

    @property
    def measured_from(self) -> float:
        if self.settled_at is None:
            return self.started_at
        return max(self.started_at, self.settled_at)


async def baseline_settings(ctx: Context, stem: str) -> Settings:
    settings = ctx.stack.settings(stem)
    await create_topics(settings, {settings.topics.scan_commands: settings.partitions})
    return settings


def fill_host_schedule(dsn: str, due_for: dict[str, float]) -> dict[str, Any]:
    """Create the seed-style table and COPY one row per host; size and timing."""
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SQL_SCHEMA)
        buffer = io.StringIO()
        for host, due in due_for.items():
            buffer.write(f"{host}\t{datetime.fromtimestamp(due, UTC).isoformat()}\n")
        with conn.cursor() as cursor:
            with cursor.copy("COPY host_schedule (host_id, next_scheduled_scan) FROM STDIN") as cp:
                cp.write(buffer.getvalue())
        conn.execute("ANALYZE host_schedule")
        size = conn.execute("SELECT pg_total_relation_size('host_schedule')").fetchone()
    return {"rows": len(due_for), "copy_seconds": time.monotonic() - started,
            "table_bytes": size[0] if size else None}  # fmt: skip


async def sql_poller_run(
    ctx: Context,
    label: str,
    due_for: dict[str, float],
    *,
    cycle: float,
    start: float,
    until: float,
    max_cycles: int = 0,
    limit: int = CAP,
    stem: str = "sql",
    kill_at: float | None = None,
) -> ExternalRun:
    """Run the seed's polling loop over `due_for` until every host has a command or `until`.

    With `kill_at`, the poller is killed with SIGKILL then and restarted at once.
    """
    settings = await baseline_settings(ctx, stem)
    table = await asyncio.to_thread(fill_host_schedule, settings.database_url, due_for)
    args = [
        "--dsn", settings.database_url, "--bootstrap", settings.kafka_bootstrap_servers,
        "--topic", settings.topics.scan_commands, "--cycle", str(cycle),
        "--limit", str(limit), "--max-cycles", str(max_cycles),
    ]  # fmt: skip
    collector = CommandCollector(settings, settings.topics.scan_commands)
    events: dict[str, float] = {}
    processes: list[ChildProcess] = []

    def pids() -> dict[str, int]:
        return {f"poller{i}": p.pid for i, p in enumerate(processes) if p.alive()}

    sampler = ProcessSampler(pids)
    async with collector, sampler:
        processes.append(ctx.stack.start_python_module(stem, "bench.baselines.sql_poller", args))
        events["started"] = time.time()
        await asyncio.to_thread(wait_ready, processes[-1], 60.0, "sql poller ready")
        with ctx.ui.phase(f"{label}: commands", total=len(due_for)) as phase:
            while time.time() < until:
                phase.update(len(collector.log), note=_window_note(start, max(due_for.values())))
                if kill_at is not None and "killed" not in events and time.time() >= kill_at:
                    events["killed"] = time.time()
                    await asyncio.to_thread(processes[-1].kill)
                    processes.append(
                        ctx.stack.start_python_module(stem, "bench.baselines.sql_poller", args)
                    )
                    events["restart_spawned"] = time.time()
                if len(collector.log) >= len(due_for) and (kill_at is None or "killed" in events):
                    break
                if max_cycles and _cycles(processes) >= max_cycles:
                    await asyncio.sleep(1.0)
                    break
                await asyncio.sleep(0.25)
        ended = time.time()
    cycles_log = [line for p in processes for line in p.log_text().splitlines() if "cycle" in line]
    for process in processes:
        process.stop(grace=3.0)
    return ExternalRun(
        label=label,
        due_for=due_for,
        log=collector.log,
        started_at=start,
        ended_at=ended,
        settled_at=events["started"],
        details={
            "table": table,
            "cycles": cycles_log[:50],
            "cycle_seconds": cycle,
            "limit": limit,
        },  # fmt: skip
        samples=sampler.samples,
        events=events,
    )


def _cycles(processes: list[ChildProcess]) -> int:
    return sum(len(re.findall(r"^cycle \d+", p.log_text(), re.M)) for p in processes)


async def _sleep_until(instant: float) -> None:
    delay = instant - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


# --- APScheduler ------------------------------------------------------------------------


async def apscheduler_run(
    ctx: Context,
    label: str,
    plan: Plan,
    n: int,
    *,
    drain_seconds: float,
    stem: str = "aps",
    add_seconds_per_job: float = 0.002,
) -> ExternalRun:
    """Register one APScheduler job per host (due times from `plan`), record its commands."""
    settings = await baseline_settings(ctx, stem)
    hosts = [f"aps-{i:07d}" for i in range(n)]
    start = time.time() + 6.0 + n * add_seconds_per_job
    due_for = plan(start, hosts)
    plan_path = ctx.stack.root / f"{settings.topic_prefix}plan.json"
    plan_path.write_text(json.dumps({"hosts": hosts, "due": [due_for[h] for h in hosts]}))
    collector = CommandCollector(settings, settings.topics.scan_commands)
    args = [
        "--dsn", settings.database_url, "--bootstrap", settings.kafka_bootstrap_servers,
        "--topic", settings.topics.scan_commands, "--plan", str(plan_path),
    ]  # fmt: skip
    process = ctx.stack.start_python_module(stem, "bench.baselines.apscheduler_dispatch", args)
    sampler = ProcessSampler(lambda: {"apscheduler": process.pid} if process.alive() else {})
    async with collector, sampler:
        with ctx.ui.phase(f"{label}: adding {n:,} jobs") as phase:
            try:
                await asyncio.to_thread(wait_ready, process, 60.0 + n * 0.05, "apscheduler ready")
            except WorkerFailed:
                process.stop()
                raise
            phase.update(note="")
        ready_match = re.search(r"apscheduler ready at ([\d.]+)", process.log_text())
        ready = float(ready_match[1]) if ready_match else time.time()
        last_due = max(due_for.values())
        if drain_seconds > 0:
            with ctx.ui.phase(f"{label}: commands", total=n) as phase:
                await wait_until(
                    lambda: len(collector.log) >= n or time.time() > last_due + drain_seconds,
                    timeout=last_due + drain_seconds - time.time() + 30,
                    what="APScheduler commands",
                    poll=0.25,
                    on_poll=lambda: phase.update(
                        len(collector.log), note=_window_note(start, last_due)
                    ),
                )
        ended = time.time()
    added = re.search(r"added (\d+) jobs in ([\d.]+) s", process.log_text())
    rss = {k: int(v) for k, v in re.findall(r"rss_(\w+)=(\d+)", process.log_text())}
    process.stop(grace=3.0)
    with psycopg.connect(settings.database_url) as conn:
        row = conn.execute("SELECT pg_total_relation_size('apscheduler_jobs')").fetchone()
    return ExternalRun(
        label=label,
        due_for=due_for,
        log=collector.log,
        started_at=start,
        ended_at=ended,
        settled_at=ready,
        details={
            "jobs": n,
            "add_seconds": float(added[2]) if added else None,
            "rss": rss,
            "table_bytes": row[0] if row else None,
        },  # fmt: skip
        samples=sampler.samples,
    )
