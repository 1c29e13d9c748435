"""4. Event throughput: scan-completed events per second a deployment applies.

N hosts are onboarded and each gets a command, which the fleet holds. When the system
is idle, all N answers are released at once (completed_at = now, score 100) and the bench
counts, every 50 ms, how many the system has applied: for Kairos the records it wrote to
the hosts table's changelog (exactly one per applied result), for heapq the count it reports.
The sustained rate is taken between 10 % and 90 % of the N results.

The CPU every process on the machine used from the release until all N were counted (the
system's own, the broker, PostgreSQL and the bench process), divided by N, is the work one
result costs: on a machine whose cores are all in use it sets the rate, and unlike the rate
it does not move with how fast the machine happens to run.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.fleet import FleetProfile, ScannerFleet
from bench.kafka_io import Offsets
from bench.metrics import ProcessSampler
from bench.report import Figure, plot_panels
from bench.scenarios.common import CAP, Context, attempt, new_result, prime
from bench.scenarios.runs import cores_note
from bench.systems import HeapqSystem, KairosSystem, System

KEY, NUMBER, TITLE = "throughput", 4, "Event throughput"
TARGET = 10_000.0
POLL_SECONDS = 0.05
"""At quick scale heapq applies its 3,000 results in about a third of a second: counts taken
every 0.25 s put two or three samples in its 10–90 % span, and its rate was as much the
sampling's as its own."""


def crossing(points: list[tuple[float, int]], level: float) -> float | None:
    """First instant the count reached `level`, interpolated between samples."""
    previous = None
    for at, count in points:
        if count >= level:
            if previous is None or count == previous[1]:
                return at
            fraction = (level - previous[1]) / (count - previous[1])
            return previous[0] + fraction * (at - previous[0])
        previous = (at, count)
    return None


async def measure(ctx: Context, system: System, n: int, timeout: float) -> dict[str, Any]:
    try:
        await system.start(max_concurrent_scans=CAP)
        fleet = ScannerFleet(system.settings, FleetProfile(scan_seconds=(0.0, 0.0)))
        sampler = ProcessSampler(system.pids, interval=0.5, shared_cpu=ctx.stack.shared_cpu_seconds)
        async with fleet, sampler, Offsets(system.settings) as offsets:
            await prime(ctx, system, fleet, n)
            base = await system.processed_results(offsets)
            at_release = sampler.sample_now()
            released = at_release["at"]
            fleet.release(score=100, scan_seconds=0.0)
            points: list[tuple[float, int]] = [(0.0, 0)]
            with ctx.ui.phase(f"{system.label}: applying {n:,} results", total=n) as phase:
                while time.time() - released < timeout:
                    done = await system.processed_results(offsets) - base
                    points.append((time.time() - released, done))
                    phase.update(done)
                    if done >= n:
                        break
                    await asyncio.sleep(POLL_SECONDS)
            at_end = sampler.sample_now()
            end = at_end["at"]
        if isinstance(system, HeapqSystem):
            # Its own reports, timed when it counted, not when the bench read them.
            lines = system.progress_lines()
            reported = [(at - released, done - base) for at, done, _ in lines if at > released]
            if reported:
                points = [(0.0, 0), *reported]
        low, high = crossing(points, 0.1 * n), crossing(points, 0.9 * n)
        sustained = 0.8 * n / (high - low) if low is not None and high is not None else None
        finished = points[-1][1] >= n
        names = {k[:-4] for s in sampler.samples for k in s if k.endswith("_cpu")}
        cpu = {name: sampler.cpu_share(name, released, end) for name in names}
        spent = cpu_spent(at_release, at_end)
        applied = points[-1][1]
        return {
            "results": n,
            "applied": points[-1][1],
            "finished": finished,
            "seconds_to_all": points[-1][0] if finished else None,
            "overall_rate": (points[-1][1] / points[-1][0]) if points[-1][0] else None,
            "sustained_rate_10_90": sustained,
            "cpu_cores": cpu,
            "cpu_seconds_release_to_end": spent,
            "cpu_cores_release_to_end": {k: v / (end - released) for k, v in spent.items()},
            "cpu_us_per_result": sum(spent.values()) / applied * 1e6 if applied else None,
            "points": points,
        }
    finally:
        system.stop()


def cpu_spent(first: dict[str, Any], last: dict[str, Any]) -> dict[str, float]:
    """CPU seconds each process sampled in both used between two samples."""
    return {
        key[:-4]: last[key] - first[key]
        for key in last
        if key.endswith("_cpu") and last[key] is not None and first.get(key) is not None
    }


async def run(ctx: Context, systems: set[str] | None = None) -> Any:
    n = ctx.size(quick=3_000, full=100_000)
    timeout = 120.0 if ctx.quick else 900.0
    result = new_result(ctx, KEY, NUMBER, TITLE, results=n, timeout_seconds=timeout)
    wanted = systems or {"kairos", "kairos2", "heapq"}
    measured: dict[str, dict[str, Any]] = {}
    plan: list[tuple[str, str, Any]] = []
    if "kairos" in wanted:
        plan.append(("kairos", "Kairos, 1 worker", KairosSystem(ctx.stack, "tput1", workers=1)))
    if "kairos2" in wanted:
        plan.append(("kairos2", "Kairos, 2 workers", KairosSystem(ctx.stack, "tput2", workers=2)))
    if "heapq" in wanted:
        plan.append(("heapq", "heapq", HeapqSystem(ctx.stack, "tput-heapq")))
    for _, label, system in plan:
        found = await attempt(result, label, measure(ctx, system, n, timeout))
        if found:
            measured[label] = found
    for label, values in measured.items():
        result.details[label] = {k: v for k, v in values.items() if k != "points"}

    def rate(label: str) -> float | None:
        values = measured.get(label)
        if not values:
            return None
        return values["sustained_rate_10_90"] or values["overall_rate"]

    heap = {"heapq": rate("heapq")} if "heapq" in measured else {}
    for label in ("Kairos, 1 worker", "Kairos, 2 workers"):
        if label in measured:
            result.figures.append(
                Figure(label=f"scan-completed applied/s, {label.split(', ')[1]}", unit="/s",
                       kairos=rate(label), baselines=heap, better="higher", target=TARGET,
                       target_text="≥ 10,000/s",
                       lower_bound=not measured[label]["finished"])
            )  # fmt: skip
    heap_cpu = measured.get("heapq", {}).get("cpu_us_per_result")
    for label in ("Kairos, 1 worker", "Kairos, 2 workers"):
        if label in measured:
            result.figures.append(
                Figure(label=f"CPU per result applied, all processes, {label.split(', ')[1]}",
                       unit="µs", kairos=measured[label]["cpu_us_per_result"],
                       baselines={"heapq": heap_cpu} if heap_cpu is not None else {})
            )  # fmt: skip
    for label, values in measured.items():
        if values["cpu_us_per_result"] is None:
            continue
        seconds = values["seconds_to_all"] or values["points"][-1][0]
        result.notes.append(
            cores_note(label, values["cpu_cores_release_to_end"], "from release to the last count")
            + f" {values['cpu_us_per_result']:,.0f} µs of CPU per result over {seconds:.2f} s."
        )
    result.notes.append(
        f"{n:,} results released at once onto scan-completed; rate between 10 % and 90 % "
        "applied, from counts sampled every 50 ms (Kairos: records on the hosts changelog, one "
        "per applied result; heapq: its own applied counter)."
    )
    result.notes.append(
        "The workers, their projector (a process of its own, `kairos projector`), the broker, "
        "PostgreSQL and the bench share the same 2 cores; a second worker can only help as far "
        "as a core is free."
    )
    png = ctx.plot_path(KEY, "applied")
    panels = {label: {"results applied": ([p[0] for p in v["points"]],
                                          [float(p[1]) for p in v["points"]])}
              for label, v in measured.items()}  # fmt: skip
    if plot_panels(png, panels, "Results applied since release", "results",
                   xlabel="seconds since the answers were released"):  # fmt: skip
        result.plots.append(png.name)
    return result
