"""3. Burst: N hosts all due in the same second; how long until the last command is out.

Set-up as in the steady scenario (onboard, first command, answer), except that every
answer places the host's next scan inside one second, `start .. start + 1 s`. The figure
is `max(issued_at) - start` over the commands for those due times, read from the commands.
"""

from __future__ import annotations

import time
from typing import Any

from bench.metrics import per_second
from bench.report import Figure, plot_latency, plot_panels
from bench.scenarios.common import (
    Context,
    attempt,
    headline,
    lateness,
    new_result,
    public,
    steady_profile,
)
from bench.scenarios.runs import (
    DispatchRun,
    apscheduler_run,
    cores_between,
    cores_note,
    kafka_dispatch_run,
    sql_poller_run,
)
from bench.systems import HeapqSystem, KairosSystem

KEY, NUMBER, TITLE = "burst", 3, "Burst"
TARGET_SECONDS = 10.0


def same_second(start: float, hosts: list[str]) -> dict[str, float]:
    return {host: start + (index % 1000) / 1000.0 for index, host in enumerate(hosts)}


def last_out(run: Any) -> dict[str, Any]:
    """Seconds from the start of the due second to the last (and first) command issued."""
    firsts: dict[str, tuple[float, float]] = {}
    for host, due, issued, received in zip(run.log.host_ids, run.log.due_at, run.log.issued_at,
                                           run.log.received_at, strict=False):  # fmt: skip
        planned = run.due_for.get(host)
        if planned is not None and abs(due - planned) <= 0.5 and host not in firsts:
            firsts[host] = (issued, received)
    start = min(run.due_for.values())
    if not firsts:
        return {"issued": 0, "planned": len(run.due_for)}
    issued = [value[0] for value in firsts.values()]
    received = [value[1] for value in firsts.values()]
    complete = len(firsts) == len(run.due_for)
    return {
        "planned": len(run.due_for),
        "issued": len(firsts),
        "complete": complete,
        "first_issued_s": min(issued) - start,
        "last_issued_s": max(issued) - start if complete else run.ended_at - start,
        "last_received_s": max(received) - start if complete else run.ended_at - start,
        "commands_per_second": len(firsts) / max(max(issued) - min(issued), 1e-3),
    }


async def run(ctx: Context, systems: set[str] | None = None) -> Any:
    n = ctx.size(quick=3_000, full=100_000)
    aps_n = min(n, 3_000 if ctx.quick else 50_000)
    drain = 120.0 if ctx.quick else 900.0
    result = new_result(ctx, KEY, NUMBER, TITLE, hosts=n, apscheduler_jobs=aps_n,
                        drain_seconds=drain)  # fmt: skip
    wanted = systems or {"kairos", "heapq", "sql1", "apscheduler"}
    runs: dict[str, Any] = {}
    if "kairos" in wanted:
        kairos = KairosSystem(ctx.stack, "burst")
        found = await attempt(result, "Kairos", kafka_dispatch_run(
            ctx, kairos, n, same_second, profile=steady_profile(),
            drain_seconds=drain))  # fmt: skip
        if found:
            runs["Kairos"] = found
    if "heapq" in wanted:
        heap = HeapqSystem(ctx.stack, "burst-heapq")
        found = await attempt(result, "heapq", kafka_dispatch_run(
            ctx, heap, n, same_second, profile=steady_profile(),
            drain_seconds=drain))  # fmt: skip
        if found:
            runs["heapq"] = found
    if "sql1" in wanted:
        start = time.time() + 5.0 + n * 2e-5
        due_for = same_second(start, [f"sql-{i:07d}" for i in range(n)])
        found = await attempt(result, "SQL poll 1 s", sql_poller_run(
            ctx, "SQL poll 1 s", due_for, cycle=1.0, start=start, until=start + drain,
            stem="burst-sql1"))  # fmt: skip
        if found:
            runs["SQL poll 1 s"] = found
    if "apscheduler" in wanted:
        found = await attempt(result, "APScheduler", apscheduler_run(
            ctx, "APScheduler", same_second, aps_n, drain_seconds=drain,
            stem="burst-aps"))  # fmt: skip
        if found:
            runs["APScheduler"] = found

    outs = {label: last_out(r) for label, r in runs.items()}
    stats = {
        label: lateness(r.log, hosts_due=r.due_for, measured_from=min(r.due_for.values()),
                        ended_at=r.ended_at)
        for label, r in runs.items()
    }  # fmt: skip
    for label in runs:
        result.details[label] = {"burst": outs[label], "lateness": public(stats[label]),
                                 "events": runs[label].events}  # fmt: skip
        if hasattr(runs[label], "prime_seconds"):
            result.details[label]["prime_seconds"] = runs[label].prime_seconds
            result.details[label]["lag_when_due_times_began"] = runs[label].lag_at_start
    kairos_out = outs.get("Kairos", {})
    scale = "" if n >= 100_000 else f"at {n:,} hosts, not 100k"
    result.figures.append(
        Figure(
            label="last command out after the due second began", unit="s",
            kairos=kairos_out.get("last_issued_s"),
            baselines={label: outs[label].get("last_issued_s") for label in outs
                       if label != "Kairos"},
            target=TARGET_SECONDS, target_text="≤ 10 s for 100k hosts", scale_note=scale,
            lower_bound=bool(kairos_out) and not kairos_out.get("complete", False),
        )
    )  # fmt: skip
    p99, bound = headline(stats["Kairos"]) if "Kairos" in stats else (None, False)
    result.figures.append(
        Figure(label="p99 lateness in the burst", unit="s", kairos=p99,
               baselines={label: headline(stats[label])[0] for label in stats if label != "Kairos"},
               lower_bound=bound)
    )  # fmt: skip
    result.notes.append(
        f"{n:,} hosts (APScheduler: {aps_n:,} jobs) due within one second; the SQL 120 s loop "
        "is left out here: its figure is set by where in its cycle the burst falls (see 2)."
    )
    if ctx.quick:
        result.notes.append(f"Quick mode: {n:,} hosts instead of 100,000.")
    for label, r in runs.items():
        if isinstance(r, DispatchRun) and outs[label].get("issued"):
            start = min(r.due_for.values())
            cores = cores_between(r, start, start + outs[label]["last_issued_s"])
            result.notes.append(cores_note(label, cores, "from the due second to the last command"))
    for label, out in outs.items():
        if out.get("issued", 0) < out.get("planned", 0):
            result.notes.append(
                f"{label}: only {out.get('issued', 0):,} of {out['planned']:,} commands were out "
                f"when the run stopped ({drain:.0f} s allowed); the figure is a lower bound."
            )
    png = ctx.plot_path(KEY, "lateness")
    if plot_latency(png, {label: s["_issued"] for label, s in stats.items()},
                    f"Burst: issued_at − due_at ({ctx.mode}, {n:,} hosts)",
                    "lateness"):  # fmt: skip
        result.plots.append(png.name)
    panels = {}
    for label, r in runs.items():
        origin = min(r.due_for.values())
        issued = per_second([t for t in r.log.issued_at if t >= origin - 1], origin=origin)
        panels[label] = {"issued/s": (issued["t"], issued["count"])}
    png = ctx.plot_path(KEY, "throughput")
    if plot_panels(png, panels, "Burst: commands issued per second", "per second"):
        result.plots.append(png.name)
    return result
