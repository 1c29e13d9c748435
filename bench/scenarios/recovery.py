"""8. Recovery: kill -9 the worker holding N hosts; time until commands flow again.

Hosts are primed as in the steady scenario with their next due times spread evenly over
a window, so commands flow at a steady rate. A third of the way in, the only worker is
killed with SIGKILL (its whole process group) and a new one is started at once, with an
empty work directory: it must rebuild its tables from the changelogs. Figures, from the
commands themselves: first `issued_at` after the kill minus the kill instant, and when
the backlog of hosts that fell due meanwhile was cleared.
"""

from __future__ import annotations

import time
from typing import Any

from bench.metrics import per_second
from bench.report import Figure, plot_panels
from bench.scenarios.common import Context, attempt, new_result, steady_profile
from bench.scenarios.runs import IDLE_SECONDS, kafka_dispatch_run, sql_poller_run
from bench.scenarios.steady import evenly
from bench.systems import HeapqSystem, KairosSystem

KEY, NUMBER, TITLE = "recovery", 8, "Recovery after kill -9"
TARGET = 30.0
BACKLOG_FLOOR = 1.0


def recovery_figures(run: Any) -> dict[str, Any]:
    killed = run.events.get("killed")
    if killed is None:
        return {"killed": False}
    log = run.log
    order = sorted(range(len(log)), key=lambda i: log.issued_at[i])
    after = [i for i in order if log.issued_at[i] > killed]
    before = [i for i in order if log.issued_at[i] <= killed]
    out: dict[str, Any] = {
        "killed_at_offset_s": killed - min(run.due_for.values()),
        "commands_before_kill": len(before),
        "commands_after_kill": len(after),
        "restart_ready_s": (run.events["restart_ready"] - killed)
        if "restart_ready" in run.events else None,
        "planned_hosts_without_command": len(run.due_for) - len(_commanded(run)),
    }  # fmt: skip
    if not after:
        out["first_command_after_kill_s"] = None
        return out
    out["first_command_after_kill_s"] = log.issued_at[after[0]] - killed
    out["first_received_after_kill_s"] = min(log.received_at[i] for i in after) - killed
    lateness = [log.issued_at[i] - log.due_at[i] for i in after]
    out["max_lateness_after_kill_s"] = max(lateness)
    # "Cleared" = back within the system's own normal lateness: twice its p99 before the
    # kill, and never less than 1 s.
    normal = sorted(log.issued_at[i] - log.due_at[i] for i in before
                    if log.due_at[i] >= min(run.due_for.values()) - 0.5)  # fmt: skip
    pre_p99 = normal[min(len(normal) - 1, int(0.99 * len(normal)))] if normal else 0.0
    threshold = max(BACKLOG_FLOOR, 2 * pre_p99)
    out["p99_lateness_before_kill_s"] = pre_p99
    out["backlog_threshold_s"] = threshold
    cleared = None
    for position in range(len(after) - 1, -1, -1):
        if lateness[position] >= threshold:
            cleared = log.issued_at[after[position]] - killed
            break
    out["backlog_cleared_s"] = cleared if cleared is not None else out["first_command_after_kill_s"]
    return out


def _commanded(run: Any) -> set[str]:
    """Planned hosts that got a command for their planned due time."""
    log = run.log
    return {host for host, due in zip(log.host_ids, log.due_at, strict=False)
            if host in run.due_for and abs(due - run.due_for[host]) <= 0.5}  # fmt: skip


async def run(ctx: Context, systems: set[str] | None = None) -> Any:
    n = ctx.size(quick=2_000, full=1_000_000)
    rate = 100.0 if ctx.quick else 1_000.0
    window = n / rate
    kill_after = min(20.0, window / 3)
    drain = 60.0 if ctx.quick else 900.0
    result = new_result(ctx, KEY, NUMBER, TITLE, hosts=n, due_per_second=rate,
                        kill_after_seconds=kill_after)  # fmt: skip
    wanted = systems or {"kairos", "kairos-static", "heapq", "sql1"}
    runs: dict[str, Any] = {}
    plan = evenly(rate)
    if "kairos" in wanted:
        kairos = KairosSystem(ctx.stack, "recovery")
        found = await attempt(result, "Kairos", kafka_dispatch_run(
            ctx, kairos, n, plan, profile=steady_profile(), drain_seconds=drain,
            kill_after=kill_after))  # fmt: skip
        if found:
            runs["Kairos"] = found
            result.details["kairos_worker_logs_tail"] = [p.log_tail(1500)
                                                         for p in kairos.processes]  # fmt: skip
    if "kairos-static" in wanted:
        static = KairosSystem(ctx.stack, "recovery-static", static_membership=True)
        found = await attempt(result, "Kairos, static membership", kafka_dispatch_run(
            ctx, static, n, plan, profile=steady_profile(), drain_seconds=drain,
            kill_after=kill_after))  # fmt: skip
        if found:
            runs["Kairos, static membership"] = found
    if "heapq" in wanted:
        heap = HeapqSystem(ctx.stack, "recovery-heapq")
        found = await attempt(result, "heapq", kafka_dispatch_run(
            ctx, heap, n, plan, profile=steady_profile(), drain_seconds=drain,
            kill_after=kill_after))  # fmt: skip
        if found:
            runs["heapq"] = found
    if "sql1" in wanted:
        start = time.time() + 5.0 + n * 2e-5
        due_for = plan(start, [f"sql-{i:07d}" for i in range(n)])
        found = await attempt(result, "SQL poll 1 s", sql_poller_run(
            ctx, "SQL poll 1 s", due_for, cycle=1.0, start=start,
            until=max(due_for.values()) + drain, stem="recovery-sql1",
            kill_at=start + kill_after))  # fmt: skip
        if found:
            runs["SQL poll 1 s"] = found
    figures = {label: recovery_figures(r) for label, r in runs.items()}
    for label, values in figures.items():
        result.details[label] = {**values, "events": runs[label].events}
    kairos_figures = figures.get("Kairos", {})
    scale = "" if n >= 1_000_000 else f"at {n:,} hosts, not 1M"
    others = {label: f for label, f in figures.items() if label != "Kairos"}
    result.figures.append(
        Figure(label="first command after kill -9", unit="s",
               kairos=kairos_figures.get("first_command_after_kill_s"),
               baselines={k: v.get("first_command_after_kill_s") for k, v in others.items()},
               target=TARGET, target_text="≤ 30 s at 1M hosts", scale_note=scale)
    )  # fmt: skip
    result.figures.append(
        Figure(label="backlog cleared (lateness back under max(1 s, 2× pre-kill p99))", unit="s",
               kairos=kairos_figures.get("backlog_cleared_s"),
               baselines={k: v.get("backlog_cleared_s") for k, v in others.items()})
    )  # fmt: skip
    result.notes.append(
        f"{n:,} hosts due at {rate:,.0f}/s over {window:.0f} s; the process was killed "
        f"{kill_after:.0f} s in and a replacement started at once. Kairos' replacement joins "
        "the same consumer group, so the broker first waits out the dead member's session "
        "(15 s), then the worker restores its tables from the changelogs."
    )
    for label, values in figures.items():
        if values.get("planned_hosts_without_command"):
            result.notes.append(
                f"{label}: {values['planned_hosts_without_command']:,} of {n:,} planned hosts "
                "never got a command for their planned due time (the run stopped "
                f"{IDLE_SECONDS:.0f} s after the last new one)."
            )
    if ctx.quick:
        result.notes.append(f"Quick mode: {n:,} hosts at {rate:,.0f}/s; the target is for 1M.")
    panels = {}
    for label, r in runs.items():
        origin = min(r.due_for.values())
        issued = per_second([t for t in r.log.issued_at if t >= origin - 1], origin=origin)
        due = per_second(list(r.due_for.values()), origin=origin)
        panels[label] = {"issued/s": (issued["t"], issued["count"]),
                         "due/s (plan)": (due["t"], due["count"])}  # fmt: skip
    markers = {label: {"kill -9": r.events["killed"] - min(r.due_for.values())}
               for label, r in runs.items() if "killed" in r.events}  # fmt: skip
    png = ctx.plot_path(KEY, "throughput")
    if plot_panels(png, panels, "Recovery: commands per second around kill -9", "per second",
                   markers=markers):  # fmt: skip
        result.plots.append(png.name)
    return result
