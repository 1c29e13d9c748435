"""2. Steady dispatch: N hosts whose due times are spread so ~1,000 become due per second.

Every host is onboarded, gets its first command, and the simulated fleet answers it with a
`completed_at` chosen so that the host's next scan falls at `start + i / rate`. From
`start` on, the system must issue one command per host as it becomes due while the fleet
keeps answering (0.5–1.5 s scans, mixed scores, 2 % failures). Lateness is read from each
command: `issued_at - due_at`, both stamped by the system itself.
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
    ExternalRun,
    apscheduler_run,
    cores_between,
    cores_note,
    kafka_dispatch_run,
    sql_poller_run,
)
from bench.systems import HeapqSystem, KairosSystem

KEY, NUMBER, TITLE = "steady", 2, "Steady dispatch"
RATE = 1000.0
TARGET_P99 = 0.100


def evenly(rate: float):
    def plan(start: float, hosts: list[str]) -> dict[str, float]:
        return {host: start + index / rate for index, host in enumerate(hosts)}

    return plan


def pace(run: DispatchRun | ExternalRun) -> dict[str, float] | None:
    """How lateness moved through the window. A system short of capacity keeps up for a
    moment, then falls behind at a steady rate: the last tenth of the hosts to fall due are
    much later than the first, and it issues fewer per second than the plan makes due."""
    issued_at: dict[str, float] = {}
    for host, due, issued in zip(run.log.host_ids, run.log.due_at, run.log.issued_at,
                                 strict=False):  # fmt: skip
        planned = run.due_for.get(host)
        if planned is not None and abs(due - planned) <= 0.5 and host not in issued_at:
            issued_at[host] = issued
    measured = sorted((due, issued_at[host]) for host, due in run.due_for.items()
                      if due >= run.measured_from and host in issued_at)  # fmt: skip
    if len(measured) < 20:
        return None
    tenth = len(measured) // 10
    first_due = measured[0][0]
    last_issued = max(issued for _, issued in measured)
    return {
        "issued_per_second": len(measured) / max(last_issued - first_due, 1e-3),
        "first_tenth_mean_lateness_s": sum(i - d for d, i in measured[:tenth]) / tenth,
        "last_tenth_mean_lateness_s": sum(i - d for d, i in measured[-tenth:]) / tenth,
    }


def summarize(run: DispatchRun | ExternalRun) -> dict[str, Any]:
    stats = lateness(
        run.log, hosts_due=run.due_for, measured_from=run.measured_from, ended_at=run.ended_at
    )
    stats["pace"] = pace(run)
    stats["window_seconds"] = max(run.due_for.values()) - min(run.due_for.values())
    stats["planned_due_per_second"] = (
        len(run.due_for) / stats["window_seconds"] if stats["window_seconds"] else None
    )
    return stats


async def run(ctx: Context, systems: set[str] | None = None) -> Any:
    n = ctx.size(quick=3_000, full=1_000_000)
    aps_n = min(n, 3_000 if ctx.quick else 50_000)
    drain = 60.0 if ctx.quick else 600.0
    result = new_result(ctx, KEY, NUMBER, TITLE, hosts=n, due_per_second=RATE,
                        apscheduler_jobs=aps_n, drain_seconds=drain)  # fmt: skip
    wanted = systems or {"kairos", "heapq", "sql120", "sql1", "apscheduler"}
    runs: dict[str, DispatchRun | ExternalRun] = {}
    plan = evenly(RATE)

    found: Any
    if "kairos" in wanted:
        kairos = KairosSystem(ctx.stack, "steady")
        found = await attempt(result, "Kairos", kafka_dispatch_run(
            ctx, kairos, n, plan, profile=steady_profile(), drain_seconds=drain))  # fmt: skip
        if found:
            runs["Kairos"] = found
            result.details["kairos_dispatcher_crashes"] = kairos.dispatcher_crashes()
    if "heapq" in wanted:
        heap = HeapqSystem(ctx.stack, "steady-heapq")
        found = await attempt(result, "heapq", kafka_dispatch_run(
            ctx, heap, n, plan, profile=steady_profile(), drain_seconds=drain))  # fmt: skip
        if found:
            runs["heapq"] = found
    if "sql1" in wanted:
        start = time.time() + 5.0 + n * 2e-5
        due_for = plan(start, [f"sql-{i:07d}" for i in range(n)])
        found = await attempt(result, "SQL poll 1 s", sql_poller_run(
            ctx, "SQL poll 1 s", due_for, cycle=1.0, start=start,
            until=max(due_for.values()) + drain, stem="steady-sql1"))  # fmt: skip
        if found:
            runs["SQL poll 1 s"] = found
    if "sql120" in wanted:
        # What each cycle of a steady 120 s loop finds: the hosts due since the last poll.
        due_now = int(120 * RATE)
        total = max(n, due_now)
        start = time.time() + 3.0 + total * 2e-5
        hosts = [f"sql-{i:07d}" for i in range(total)]
        due_for = {h: start - 120.0 + i / RATE for i, h in enumerate(hosts[:due_now])}
        later = {h: start + 86_400.0 for h in hosts[due_now:]}
        cycles = 1 if ctx.quick else 3
        run_120 = await attempt(result, "SQL poll 120 s", sql_poller_run(
            ctx, "SQL poll 120 s", {**due_for, **later}, cycle=120.0, start=start,
            until=start + 120.0 * cycles + 60.0, max_cycles=cycles,
            stem="steady-sql120"))  # fmt: skip
        if run_120:
            run_120.due_for = due_for  # only the rows that were due are measured
            run_120.started_at = min(due_for.values())
            run_120.settled_at = None
            run_120.details["rows_in_table"] = total
            runs["SQL poll 120 s"] = run_120
    if "apscheduler" in wanted:
        found = await attempt(result, "APScheduler", apscheduler_run(
            ctx, "APScheduler", plan, aps_n, drain_seconds=drain, stem="steady-aps"))  # fmt: skip
        if found:
            runs["APScheduler"] = found

    stats = {label: summarize(r) for label, r in runs.items()}
    result.details.update({label: public(s) for label, s in stats.items()})
    for label, r in runs.items():
        result.details[label]["events"] = r.events
        if isinstance(r, DispatchRun):
            result.details[label]["prime_seconds"] = r.prime_seconds
            result.details[label]["lag_when_due_times_began"] = r.lag_at_start
            result.details[label]["cpu_cores_during_window"] = cores_between(
                r, r.started_at, max(r.due_for.values())
            )
            result.details[label]["peak_rss_bytes"] = {
                key: max((s[key] for s in r.samples if s.get(key)), default=None)
                for key in {k for s in r.samples for k in s if k.endswith("_rss")}
            }
        else:
            result.details[label].update(r.details)

    kairos_stats = stats.get("Kairos")
    scale = "" if n >= 1_000_000 else f"at {n:,} hosts, not 1M"
    for key, name in (("p50", "p50 lateness"), ("p99", "p99 lateness"), ("max", "max lateness")):
        value, bound = headline(kairos_stats, key) if kairos_stats else (None, False)
        baselines = {}
        for label in ("SQL poll 120 s", "SQL poll 1 s", "APScheduler", "heapq"):
            if label in stats:
                baselines[label] = headline(stats[label], key)[0]
        result.figures.append(
            Figure(
                label=name, unit="s", kairos=value, baselines=baselines,
                target=TARGET_P99 if key == "p99" else None,
                target_text="p99 ≤ 100 ms at 1M hosts" if key == "p99" else "",
                scale_note=scale if key == "p99" else "", lower_bound=bound,
            )
        )  # fmt: skip

    result.notes += _notes(ctx, n, aps_n, stats, runs)
    latency_png = ctx.plot_path(KEY, "lateness")
    if plot_latency(latency_png, {label: s["_issued"] for label, s in stats.items()},
                    f"Steady dispatch: issued_at − due_at ({ctx.mode}, {n:,} hosts)",
                    "lateness"):  # fmt: skip
        result.plots.append(latency_png.name)
    panels: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for label, r in runs.items():
        origin = min(r.due_for.values())
        issued = per_second([t for t in r.log.issued_at if t >= origin - 1], origin=origin)
        due = per_second(list(r.due_for.values()), origin=origin)
        panels[label] = {"issued/s (issued_at)": (issued["t"], issued["count"]),
                         "due/s (plan)": (due["t"], due["count"])}  # fmt: skip
    rate_png = ctx.plot_path(KEY, "throughput")
    if plot_panels(rate_png, panels, "Steady dispatch: commands issued vs due, per second",
                   "per second"):  # fmt: skip
        result.plots.append(rate_png.name)
    return result


def _notes(ctx, n, aps_n, stats, runs) -> list[str]:  # noqa: ANN001 - local helper
    notes = [
        f"Due rate {RATE:,.0f}/s: hosts i = 0..N-1 become due at start + i/{RATE:,.0f} s; "
        "each system got the same plan (APScheduler: the first "
        f"{aps_n:,} hosts only, registering more jobs does not fit a {ctx.mode} run).",
        "SQL poll 120 s: the run measures one real poll (quick) over rows whose due times "
        "were spread across the 120 s before it, which is what each cycle of a steady 120 s "
        "loop finds; rows beyond the LIMIT (100,000) wait for the next cycle.",
        "SQL and APScheduler baselines only dispatch; they do not consume the fleet's "
        "results, which Kairos and heapq do in the same window.",
    ]
    if ctx.quick:
        notes.append(
            f"Quick mode: {n:,} hosts instead of 1,000,000; the target is stated for 1M hosts."
        )
    for label, s in stats.items():
        if s.get("unissued_by_end"):
            notes.append(
                f"{label}: {s['unissued_by_end']:,} of {s['measured']:,} planned hosts had no "
                "command when the run ended; their lateness enters the figures as a lower bound "
                "(end of run − due), marked ≥."
            )
        if s.get("excluded_due_before_system_settled"):
            notes.append(
                f"{label}: {s['excluded_due_before_system_settled']:,} hosts were due before "
                "the system had finished applying the priming results and are not measured."
            )
    for label, s in stats.items():
        if s.get("pace") and s.get("planned_due_per_second"):
            notes.append(
                f"{label}: issued {s['pace']['issued_per_second']:,.0f}/s over the window against "
                f"{s['planned_due_per_second']:,.0f} due/s planned; the first tenth of the hosts "
                f"to fall due were {s['pace']['first_tenth_mean_lateness_s']:.2f} s late on "
                f"average, the last tenth {s['pace']['last_tenth_mean_lateness_s']:.2f} s."
            )
    for label, r in runs.items():
        if isinstance(r, DispatchRun):
            cores = cores_between(r, r.started_at, max(r.due_for.values()))
            notes.append(cores_note(label, cores, "while hosts fell due"))
        if isinstance(r, DispatchRun) and r.settled_at is None:
            notes.append(
                f"{label}: still {r.lag_at_start:,} input records behind when the first "
                "host became due (setup overlapped the window)."
            )
    return notes
