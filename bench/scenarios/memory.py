"""7. Memory: resident memory per host of a deployment holding N hosts.

The worker and the projector start, the worker takes the config (first scans spread over a
day, so nothing is due during the run) and the RSS of both is sampled from
/proc/<pid>/status (VmRSS) and added up: what a host costs Kairos, wherever it is kept.
Then N hosts are onboarded; once the worker and the projector have consumed everything,
RSS is sampled again. Per host = (RSS after - RSS before) / N. The same for the heapq
baseline (one process); APScheduler reports its own VmRSS before and after registering its
jobs, and the bytes its job table takes in PostgreSQL; the SQL poller keeps hosts only in
PostgreSQL (table bytes per host).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import psycopg

from bench.kafka_io import Offsets, start_producer
from bench.load import host_ids, onboard
from bench.metrics import ProcessSampler
from bench.report import Figure, plot_panels
from bench.scenarios.common import CAP, Context, attempt, new_result, settle
from bench.scenarios.runs import apscheduler_run, baseline_settings, fill_host_schedule
from bench.systems import HeapqSystem, KairosSystem, System

KEY, NUMBER, TITLE = "memory", 7, "Memory per host"
TARGET = 1024.0
DAY = 86_400


def system_rss(sample: dict[str, Any], processes: int) -> float | None:
    """RSS of all of a system's processes in one sample; None unless every one was read."""
    values = [value for key, value in sample.items() if key.endswith("_rss") and value]
    return float(sum(values)) if len(values) == processes else None


def rss_by_process(sample: dict[str, Any]) -> dict[str, int]:
    return {key[:-4]: value for key, value in sample.items() if key.endswith("_rss") and value}


async def rss_of(sampler: ProcessSampler, processes: int, seconds: float = 2.0) -> float:
    values = []
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = system_rss(sampler.sample_now(), processes)
        if value:
            values.append(value)
        await asyncio.sleep(0.25)
    return float(statistics.median(values))


async def settle_projector(ctx: Context, system: KairosSystem, *, timeout: float) -> None:
    """Wait until the projector has committed every per-host record it was sent."""
    with ctx.ui.phase(f"{system.label}: projecting") as phase:
        async with Offsets(system.settings) as offsets:
            await offsets.wait_caught_up(
                system.projector_group,
                system.projected_topics(),
                timeout=timeout,
                on_poll=lambda lag: phase.update(note=f"lag {lag:,}"),
            )


async def measure(ctx: Context, system: System, n: int) -> dict[str, Any]:
    try:
        await system.start(initial_spread_seconds=DAY, max_concurrent_scans=CAP)
        processes = len(system.pids())
        sampler = ProcessSampler(system.pids, interval=1.0)
        async with sampler:
            before = await rss_of(sampler, processes)
            before_by_process = rss_by_process(sampler.samples[-1])
            producer = await start_producer(system.settings)
            started = time.time()
            try:
                with ctx.ui.phase(f"{system.label}: onboarding {n:,} hosts", total=n) as phase:
                    await onboard(producer, system.settings, host_ids(n, system.name),
                                  on_sent=lambda k: phase.update(k))  # fmt: skip
            finally:
                await producer.stop()
            caught_up = await settle(ctx, system, f"{system.label}: consuming",
                                     timeout=n / 50.0 + 300)  # fmt: skip
            if isinstance(system, KairosSystem):
                await settle_projector(ctx, system, timeout=n / 50.0 + 300)
            after = await rss_of(sampler, processes, seconds=3.0)
        totals = [(s["at"] - started, system_rss(s, processes)) for s in sampler.samples]
        readings = [(at, value) for at, value in totals if value is not None]
        at_end = rss_by_process(sampler.samples[-1])
        return {
            "hosts": n,
            "rss_before_bytes": before,
            "rss_after_bytes": after,
            "rss_at_end_by_process": at_end,
            # Which process the bytes went to: the worker's tables, or the projector.
            "bytes_per_host_by_process": {
                name: (rss - before_by_process[name]) / n
                for name, rss in at_end.items()
                if before_by_process.get(name)
            },
            "bytes_per_host": (after - before) / n,
            "peak_rss_bytes": max((value for _, value in readings), default=None),
            "onboard_seconds": caught_up - started,
            "onboard_rate": n / max(caught_up - started, 1e-3),
            "series": {"t": [at for at, _ in readings], "value": [v for _, v in readings]},
        }
    finally:
        system.stop()


def table_bytes(dsn: str, table: str) -> int | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pg_total_relation_size(%s)", (table,)).fetchone()
    return row[0] if row else None


async def run(ctx: Context, systems: set[str] | None = None) -> Any:
    sizes = [ctx.scale] if ctx.scale else ([15_000] if ctx.quick else [100_000, 1_000_000])
    aps_n = min(sizes[-1], 5_000 if ctx.quick else 100_000)
    result = new_result(ctx, KEY, NUMBER, TITLE, hosts=sizes, apscheduler_jobs=aps_n)
    wanted = systems or {"kairos", "heapq", "sql1", "apscheduler"}
    measured: dict[str, dict[str, Any]] = {}
    for n in sizes:
        if "kairos" in wanted:
            found = await attempt(result, f"Kairos {n:,}",
                                  measure(ctx, KairosSystem(ctx.stack, "mem"), n))  # fmt: skip
            if found:
                measured[f"Kairos@{n}"] = found
        if "heapq" in wanted:
            found = await attempt(result, f"heapq {n:,}",
                                  measure(ctx, HeapqSystem(ctx.stack, "mem-heapq"), n))  # fmt: skip
            if found:
                measured[f"heapq@{n}"] = found
    sql: dict[str, Any] = {}
    if "sql1" in wanted:
        settings = await baseline_settings(ctx, "mem-sql")
        n = sizes[-1]
        filled = await asyncio.to_thread(
            fill_host_schedule, settings.database_url,
            {f"sql-{i:07d}": time.time() + DAY for i in range(n)},
        )  # fmt: skip
        sql = {"rows": n, "table_bytes": filled["table_bytes"],
               "bytes_per_host": filled["table_bytes"] / n}  # fmt: skip
    aps: dict[str, Any] = {}
    if "apscheduler" in wanted:

        def far(start: float, hosts: list[str]) -> dict[str, float]:
            return {host: start + DAY + i for i, host in enumerate(hosts)}

        found = await attempt(result, "APScheduler", apscheduler_run(
            ctx, "APScheduler", far, aps_n, drain_seconds=0.0, stem="mem-aps"))  # fmt: skip
        if found:
            rss = found.details.get("rss", {})
            aps = {"jobs": aps_n, "rss": rss, "add_seconds": found.details.get("add_seconds")}
            if rss.get("before") and rss.get("after"):
                aps["rss_bytes_per_job"] = (rss["after"] - rss["before"]) / aps_n
            aps["table_bytes"] = found.details.get("table_bytes")
    result.details = {label: {k: v for k, v in m.items() if k != "series"}
                      for label, m in measured.items()}  # fmt: skip
    result.details["SQL poller (PostgreSQL table)"] = sql
    result.details["APScheduler"] = aps
    for n in sizes:
        kairos = measured.get(f"Kairos@{n}")
        baselines: dict[str, float | None] = {}
        if f"heapq@{n}" in measured:
            baselines["heapq"] = measured[f"heapq@{n}"]["bytes_per_host"]
        scale = "" if n >= 100_000 else f"at {n:,} hosts, not 100k"
        result.figures.append(
            Figure(label=f"RSS per host at {n:,} hosts (Kairos: worker + projector)", unit="B/host",
                   kairos=kairos["bytes_per_host"] if kairos else None, baselines=baselines,
                   target=TARGET, target_text="≤ 1 KiB/host", scale_note=scale)
        )  # fmt: skip
    postgres_rows = {}
    if sql.get("bytes_per_host"):
        postgres_rows["SQL poll 1 s"] = sql["bytes_per_host"]
    if aps.get("table_bytes"):
        postgres_rows["APScheduler"] = aps["table_bytes"] / aps_n
    if postgres_rows:
        result.figures.append(
            Figure(label="bytes per host kept in PostgreSQL (table + indexes)", unit="B/host",
                   kairos=None, baselines=postgres_rows)
        )  # fmt: skip
    result.notes.append(
        "RSS per host is the growth of the system's VmRSS over the onboarding divided by the "
        "hosts; it includes the interpreter's allocator overhead, which is what an operator pays. "
        "Kairos' figure adds up its worker and its projector process (the projector runs on its "
        "own, as docker-compose.yml deploys it); heapq is one process."
    )
    if sql:
        result.notes.append(
            f"SQL poller: it holds no hosts in memory; its PostgreSQL table takes "
            f"{sql['bytes_per_host']:,.0f} B/host (table + indexes, {sql['rows']:,} rows)."
        )
    if aps:
        result.notes.append(
            f"APScheduler ({aps_n:,} jobs in SQLAlchemyJobStore) keeps its jobs in PostgreSQL; "
            f"its process grew by {aps.get('rss_bytes_per_job') or float('nan'):,.0f} B per job "
            "(not comparable with an in-memory dispatcher, so not in the RSS row)."
        )
    if ctx.quick:
        result.notes.append(f"Quick mode: {sizes[0]:,} hosts; the target is stated for 100k "
                            "and 1M hosts.")  # fmt: skip
    panels = {label: {"RSS (MiB)": (m["series"]["t"], [v / 2**20 for v in m["series"]["value"]])}
              for label, m in measured.items()}  # fmt: skip
    png = ctx.plot_path(KEY, "rss")
    if plot_panels(png, panels, "RSS while onboarding (all of a system's processes)", "MiB",
                   xlabel="seconds since onboarding began"):  # fmt: skip
        result.plots.append(png.name)
    return result
