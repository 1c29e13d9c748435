"""9. Cron schedules: N schedules firing every minute on one worker; one schedule over M hosts.

(a) M hosts are onboarded (first compliance scans spread over a day, so none is due), then N
generic schedules are published on schedule-changes, schedule i scanning host i with scanner
`nmap` every minute. Every schedule uses the 6-field cron `* * * * * S` (croniter's order,
seconds last): once a minute at second S, where S is picked so that the first occurrence comes
a little after the worker has taken all N schedules in — the load of `* * * * *` without
waiting up to a minute for the next boundary. start_at/end_at bound the schedules to the
measured occurrences. The simulated fleet answers each command after 0.5–1 s, so a schedule's
run is over long before its next occurrence. For every (schedule, occurrence) the bench takes
the first command the system emitted for it: lateness = its `issued_at` − the occurrence
(`due_at`), both stamped by the system. Kairos also records each run on kairos-schedule-runs
(`schedule.run`: `fired_at`, outcome, commands issued); those give runs recorded per
occurrence and `fired_at` − occurrence. An occurrence without a command by the end of the run
enters the distribution as end of run − occurrence, marked ≥.

(b) One schedule targeting every host (no ids, no filter), scanner `nuclei`, firing once:
time from its occurrence until the last of its M commands was issued.

Baselines on the same plan: APScheduler 3 (AsyncIOScheduler, SQLAlchemyJobStore on the bench
PostgreSQL, one CronTrigger job per schedule, one DateTrigger job for (b)) and a heapq over
croniter; both emit the same ScanCommand JSON (`bench/baselines/cron_dispatch.py`).
In quick mode the baselines' occurrences are interleaved with Kairos' (at +25 s and +35 s
within each minute) to save two minutes of wall time; the run records every system's busy
spans and says whether they overlapped. In full mode each system runs on its own.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bench.fleet import FleetProfile, ScannerFleet
from bench.kafka_io import CommandCollector, CommandLog, TopicWatcher, start_producer
from bench.load import host_ids, onboard, publish_schedules
from bench.metrics import ProcessSampler, distribution, per_second
from bench.report import Figure, ScenarioResult, plot_latency, plot_panels
from bench.scenarios.common import CAP, Context, attempt, new_result, settle
from bench.scenarios.runs import baseline_settings
from bench.stack import wait_ready
from bench.systems import KairosSystem

KEY, NUMBER, TITLE = "cron", 9, "Cron schedules"
TARGET_P99 = 1.0
TARGET_FLEET = 10.0
DAY = 86_400
SCHEDULE_SCANNER = "nmap"
FLEET_SCANNER = "nuclei"
FLEET_ID = "fleet"
BASELINE_OFFSETS = {"apscheduler": 25.0, "heapq": 35.0}  # quick: seconds after Kairos' second
FLEET_AFTER_FIRST = 15.0  # baselines' (b) job: this long after their first occurrence
LABELS = {"apscheduler": "APScheduler", "heapq": "heapq"}


@dataclass
class CronPlan:
    """What one system is asked to do: schedules, their occurrences, the (b) instant."""

    schedules: list[tuple[str, str]]  # (schedule id, host id)
    first: float  # the first occurrence, a whole second (epoch)
    occurrences: int
    fleet_hosts: list[str]
    fleet_at: float | None = None

    @property
    def second(self) -> int:
        return int(self.first) % 60

    @property
    def expression(self) -> str:
        return f"* * * * * {self.second}"

    @property
    def instants(self) -> list[float]:
        return [self.first + 60.0 * k for k in range(self.occurrences)]

    @property
    def end(self) -> float:
        """end_at of the schedules: after the last measured occurrence, before the next."""
        return self.instants[-1] + 30.0


@dataclass
class CronRun:
    """What one system did with its plan."""

    label: str
    plan: CronPlan
    log: CommandLog
    ended_at: float  # end of the (a) window: censoring instant
    fleet_ended_at: float | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)  # Kairos' schedule.run records
    details: dict[str, Any] = field(default_factory=dict)


def iso(instant: float) -> str:
    return datetime.fromtimestamp(instant, UTC).isoformat()


def schedule_definition(schedule_id: str, host: str, plan: CronPlan) -> dict[str, Any]:
    return {
        "id": schedule_id,
        "name": schedule_id,
        "scanner": SCHEDULE_SCANNER,
        "recurrence": {"kind": "cron", "expression": plan.expression},
        "start_at": iso(plan.first),
        "end_at": iso(plan.end),
        "targets": {"object_type": "host", "object_ids": [host]},
    }


def fleet_definition(at: float) -> dict[str, Any]:
    return {
        "id": FLEET_ID,
        "name": FLEET_ID,
        "scanner": FLEET_SCANNER,
        "recurrence": {"kind": "cron", "expression": f"* * * * * {int(at) % 60}"},
        "start_at": iso(at),
        "end_at": iso(at + 30.0),
        "max_runs": 1,
        "targets": {"object_type": "host"},
    }


# --- what the commands say --------------------------------------------------------------


def occurrence_lateness(run: CronRun) -> dict[str, Any]:
    """Lateness of the first command for every (schedule, occurrence) of part (a)."""
    plan, log = run.plan, run.log
    expected = {schedule_id for schedule_id, _ in plan.schedules}
    instants = {round(t) for t in plan.instants}
    firsts: dict[tuple[str, int], int] = {}
    unexpected = 0
    for index, schedule_id in enumerate(log.schedule_ids):
        if schedule_id not in expected:
            continue
        key = (schedule_id, round(log.due_at[index]))
        if key[1] not in instants:
            unexpected += 1
        elif key not in firsts:
            firsts[key] = index
    issued, received, censored = [], [], []
    per_occurrence: dict[str, dict[str, Any]] = {}
    for instant in sorted(instants):
        late = [log.issued_at[i] - instant for (s, t), i in firsts.items() if t == instant]
        per_occurrence[iso(instant)] = {
            "expected": len(expected),
            "commands": len(late),
            "issued_minus_occurrence_s": distribution(late),
        }
    for schedule_id in expected:
        for instant in instants:
            index = firsts.get((schedule_id, instant))
            if index is None:
                censored.append(max(0.0, run.ended_at - instant))
                continue
            issued.append(log.issued_at[index] - instant)
            received.append(log.received_at[index] - instant)
    missing = len(censored)
    return {
        "expected": len(expected) * len(instants),
        "issued": len(issued),
        "unissued_by_end": missing,
        "unexpected_commands": unexpected,
        "issued_minus_occurrence_s": distribution(issued),
        "received_minus_occurrence_s": distribution(received),
        "with_unissued_as_lower_bound_s": distribution(issued + censored) if missing else None,
        "received_with_unissued_as_lower_bound_s": (
            distribution(received + censored) if missing else None
        ),
        "per_occurrence": per_occurrence,
        "_issued": issued,
    }


def fleet_out(run: CronRun) -> dict[str, Any]:
    """Part (b): seconds from the one occurrence until the first and the last command."""
    plan, log = run.plan, run.log
    if plan.fleet_at is None:
        return {}
    firsts = {log.command_ids[i]: i for i, s in enumerate(log.schedule_ids) if s == FLEET_ID}
    issued = sorted(log.issued_at[i] for i in firsts.values())
    received = sorted(log.received_at[i] for i in firsts.values())
    complete = len(issued) >= len(plan.fleet_hosts)
    end = run.fleet_ended_at or run.ended_at
    out: dict[str, Any] = {"hosts": len(plan.fleet_hosts), "issued": len(issued),
                           "complete": complete}  # fmt: skip
    if issued:
        out["first_issued_s"] = issued[0] - plan.fleet_at
        out["last_issued_s"] = (issued[-1] if complete else end) - plan.fleet_at
        out["last_received_s"] = (received[-1] if complete else end) - plan.fleet_at
        out["commands_per_second"] = len(issued) / max(issued[-1] - issued[0], 1e-3)
    else:
        out["last_issued_s"] = end - plan.fleet_at
    return out


def recorded_runs(run: CronRun) -> dict[str, Any]:
    """Kairos' own account: schedule.run records per occurrence, outcomes, fired_at lateness."""
    expected = {schedule_id for schedule_id, _ in run.plan.schedules}
    per_occurrence: dict[str, Counter[str]] = {iso(t): Counter() for t in run.plan.instants}
    fired: list[float] = []
    seen: set[tuple[str, str]] = set()
    for record in run.runs:
        if record["schedule_id"] not in expected:
            continue
        occurrence = datetime.fromisoformat(record["occurrence"]).timestamp()
        key = iso(occurrence)
        if key not in per_occurrence or (record["schedule_id"], key) in seen:
            continue
        seen.add((record["schedule_id"], key))
        per_occurrence[key][record["outcome"]] += 1
        fired.append(datetime.fromisoformat(record["fired_at"]).timestamp() - occurrence)
    counts = {key: sum(c.values()) for key, c in per_occurrence.items()}
    return {
        "expected_per_occurrence": len(expected),
        "recorded_per_occurrence": counts,
        "outcomes_per_occurrence": {key: dict(c) for key, c in per_occurrence.items()},
        "fired_minus_occurrence_s": distribution(fired),
        "_fired": fired,
    }


def busy_spans(run: CronRun) -> list[tuple[float, float]]:
    """[occurrence, last command for it] of every occurrence (and of (b)), wall time."""
    spans = []
    log = run.log
    for instant in [*run.plan.instants, *([run.plan.fleet_at] if run.plan.fleet_at else [])]:
        issued = [log.issued_at[i] for i in range(len(log)) if abs(log.due_at[i] - instant) < 0.5]
        spans.append((instant, max(issued) if issued else run.ended_at))
    return spans


# --- Kairos -------------------------------------------------------------------------------


class RunRecords(TopicWatcher):
    """The `schedule.run` records on kairos-schedule-runs."""

    def __init__(self, system: KairosSystem) -> None:
        self.records: list[dict[str, Any]] = []
        super().__init__(system.settings, [system.settings.topics.schedule_runs], self._collect)

    def _collect(self, record: Any, received: float) -> None:
        if record.value:
            self.records.append(json.loads(record.value))


class KairosCron:
    """One worker through both parts, step by step, so baselines can run in its gaps."""

    def __init__(self, ctx: Context, n: int, m: int, occurrences: int) -> None:
        self.ctx = ctx
        self.n, self.m, self.occurrences = n, m, occurrences
        self.system = KairosSystem(ctx.stack, "cron")
        self.fleet = ScannerFleet(self.system.settings, FleetProfile(scan_seconds=(0.5, 1.0)))
        self.records = RunRecords(self.system)
        self.sampler = ProcessSampler(self.system.pids, interval=1.0)
        self.plan: CronPlan | None = None
        self.details: dict[str, Any] = {}
        self._exits = AsyncExitStack()

    async def __aenter__(self) -> KairosCron:
        self._exits.callback(self._stop_worker)  # last out, also when starting fails
        try:
            await self.system.start(max_concurrent_scans=CAP, initial_spread_seconds=DAY)
            for part in (self.fleet, self.records, self.sampler):
                await self._exits.enter_async_context(part)
        except BaseException:
            await self._exits.aclose()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._exits.__aexit__(*exc)

    def _stop_worker(self) -> None:
        self.details["dispatcher_crashes"] = self.system.dispatcher_crashes()
        self.system.stop()

    async def prepare(
        self, first_lead: float, on_plan: Callable[[CronPlan], None] | None = None
    ) -> CronPlan:
        """Onboard M hosts, publish N schedules whose first occurrence is `first_lead` away.

        `on_plan` gets the plan before the schedules go out (baselines start meanwhile).
        """
        ctx, system, settings = self.ctx, self.system, self.system.settings
        hosts = host_ids(self.m, "cron")
        producer = await start_producer(settings)
        try:
            started = time.time()
            with ctx.ui.phase(f"Kairos: onboarding {self.m:,} hosts", total=self.m) as phase:
                await onboard(producer, settings, hosts, on_sent=lambda k: phase.update(k))
            caught_up = await settle(ctx, system, "Kairos: taking the hosts in",
                                     timeout=self.m / 50.0 + 120)  # fmt: skip
            self.details["onboard_seconds"] = caught_up - started
            first = float(math.ceil(time.time() + first_lead))
            plan = CronPlan([(f"cron-{i:07d}", hosts[i]) for i in range(self.n)], first,
                            self.occurrences, hosts)  # fmt: skip
            if on_plan is not None:
                on_plan(plan)
            schedules = [schedule_definition(s, h, plan) for s, h in plan.schedules]
            started = time.time()
            with ctx.ui.phase(f"Kairos: publishing {self.n:,} schedules", total=self.n) as phase:
                await publish_schedules(producer, settings, schedules,
                                        on_sent=lambda k: phase.update(k))  # fmt: skip
            caught_up = await settle(ctx, system, "Kairos: taking the schedules in",
                                     timeout=max(60.0, first - time.time() + 60))  # fmt: skip
        finally:
            await producer.stop()
        self.details["schedules_taken_in_seconds"] = caught_up - started
        self.details["schedules_taken_in_before_first_occurrence_s"] = first - caught_up
        self.plan = plan
        return plan

    async def measure_schedules(self, drain: float) -> float:
        """Wait through the occurrences until every command and run record is in; the end."""
        assert self.plan is not None
        plan, log = self.plan, self.fleet.log
        expected = len(plan.schedules) * plan.occurrences
        wanted = {schedule_id for schedule_id, _ in plan.schedules}
        last = plan.instants[-1]
        with self.ctx.ui.phase(f"Kairos: {self.n:,} schedules × {plan.occurrences} occurrences",
                               total=expected) as phase:  # fmt: skip
            while time.time() < last + drain:
                commands = sum(1 for s in log.schedule_ids if s in wanted)
                runs = sum(1 for r in self.records.records if r["schedule_id"] in wanted)
                phase.update(commands, note=_note(plan.instants, time.time()))
                if commands >= expected and runs >= expected:
                    break
                await asyncio.sleep(0.5)
        return time.time()

    async def measure_fleet(self, timeout: float) -> tuple[float, float]:
        """Part (b): publish the fleet schedule, wait for its M commands; (occurrence, end)."""
        assert self.plan is not None
        settings = self.system.settings
        at = float(math.ceil(time.time() + 4.0))
        producer = await start_producer(settings)
        try:
            await publish_schedules(producer, settings, [fleet_definition(at)])
        finally:
            await producer.stop()
        self.plan.fleet_at = at
        log = self.fleet.log
        with self.ctx.ui.phase(f"Kairos: one schedule over {self.m:,} hosts",
                               total=self.m) as phase:  # fmt: skip
            while time.time() < at + timeout:
                out = sum(1 for s in log.schedule_ids if s == FLEET_ID)
                phase.update(out, note=_note([at], time.time()))
                if out >= self.m:
                    break
                await asyncio.sleep(0.25)
        return at, time.time()

    def result(self, ended_at: float, fleet_ended_at: float | None) -> CronRun:
        assert self.plan is not None
        run = CronRun("Kairos", self.plan, self.fleet.log, ended_at, fleet_ended_at,
                      runs=list(self.records.records), details=self.details)  # fmt: skip
        # Cores the worker used from each occurrence until its last command (1.0 = a core).
        self.details["worker_cores_while_firing"] = {
            iso(start): self.sampler.cpu_share("worker0", start, end)
            for start, end in busy_spans(run)
        }
        return run


def _note(instants: list[float], now: float) -> str:
    coming = [t for t in instants if t > now]
    if coming:
        return f"next occurrence in {coming[0] - now:.0f} s"
    return f"{now - instants[-1]:.0f} s after the last occurrence"


# --- baselines ----------------------------------------------------------------------------


async def baseline_run(ctx: Context, engine: str, plan: CronPlan, *, drain: float) -> CronRun:
    """Run one cron baseline process on `plan`; collect its commands until done or drained."""
    label = LABELS[engine]
    settings = await baseline_settings(ctx, f"cron-{engine}")
    path = ctx.stack.root / f"{settings.topic_prefix}cron-plan.json"
    path.write_text(json.dumps({
        "schedules": plan.schedules, "expression": plan.expression, "start": plan.first,
        "end": plan.end,
        "fleet": {"at": plan.fleet_at, "hosts": plan.fleet_hosts} if plan.fleet_at else None,
    }))  # fmt: skip
    args = ["--engine", engine, "--dsn", settings.database_url, "--bootstrap",
            settings.kafka_bootstrap_servers, "--topic", settings.topics.scan_commands,
            "--plan", str(path)]  # fmt: skip
    collector = CommandCollector(settings, settings.topics.scan_commands)
    process = ctx.stack.start_python_module(f"cron-{engine}", "bench.baselines.cron_dispatch",
                                            args)  # fmt: skip
    details: dict[str, Any] = {}
    try:
        async with collector:
            await asyncio.to_thread(wait_ready, process, 60.0 + len(plan.schedules) * 0.01,
                                    "cron baseline ready")  # fmt: skip
            details["ready_before_first_occurrence_s"] = plan.first - time.time()
            expected = len(plan.schedules) * plan.occurrences + len(plan.fleet_hosts)
            last = max([*plan.instants, plan.fleet_at or 0.0])
            with ctx.ui.phase(f"{label}: commands", total=expected) as phase:
                while time.time() < last + drain:
                    phase.update(len(collector.log), note=_note(plan.instants, time.time()))
                    if len(collector.log) >= expected:
                        break
                    await asyncio.sleep(0.5)
            ended = time.time()
    finally:
        process.stop(grace=3.0)
    added = [line for line in process.log_text().splitlines() if line.startswith("added ")]
    if added:
        details["jobs_added"] = added[0]
    return CronRun(label, plan, collector.log, ended, ended, details=details)


def shifted(plan: CronPlan, offset: float, engine: str, *, interleaved: bool) -> CronPlan:
    """The same schedules for a baseline, `offset` seconds later, with ids of its own.

    Its (b) job comes between its first two occurrences when interleaved (quick), else half a
    minute after its last one, when a large (a) has had time to drain.
    """
    first = plan.first + offset
    schedules = [(f"{engine}-{i:07d}", host) for i, (_, host) in enumerate(plan.schedules)]
    moved = CronPlan(schedules, first, plan.occurrences, plan.fleet_hosts)
    moved.fleet_at = first + FLEET_AFTER_FIRST if interleaved else moved.end
    return moved


# --- the scenario ---------------------------------------------------------------------------


async def run(ctx: Context, systems: set[str] | None = None) -> Any:
    n = ctx.size(quick=1_000, full=100_000)
    m = max(n, 2_000 if ctx.quick else 100_000)
    occurrences = 2 if ctx.quick else 5
    drain = 25.0 if ctx.quick else 300.0
    fleet_timeout = 60.0 if ctx.quick else 900.0
    interleave = ctx.quick
    result = new_result(ctx, KEY, NUMBER, TITLE, schedules=n, hosts=m, occurrences=occurrences,
                        drain_seconds=drain, interleaved=interleave)  # fmt: skip
    wanted = systems or {"kairos", "apscheduler", "heapq"}
    engines = [engine for engine in ("apscheduler", "heapq") if engine in wanted]
    runs: dict[str, CronRun] = {}

    async def baselines(plan: CronPlan, chosen: list[str], offset: dict[str, float]) -> None:
        found = await asyncio.gather(*(
            attempt(result, LABELS[engine], baseline_run(
                ctx, engine, shifted(plan, offset.get(engine, 0.0), engine,
                                     interleaved=interleave), drain=drain))
            for engine in chosen))  # fmt: skip
        for engine, value in zip(chosen, found, strict=True):
            if value is not None:
                runs[LABELS[engine]] = value

    plan: CronPlan | None = None
    if "kairos" in wanted:
        kairos = KairosCron(ctx, n, m, occurrences)

        async def kairos_part() -> None:
            nonlocal plan
            waiting: list[asyncio.Task[None]] = []

            def start_baselines(kairos_plan: CronPlan) -> None:
                if interleave and engines:
                    task = baselines(kairos_plan, engines, BASELINE_OFFSETS)
                    waiting.append(asyncio.create_task(task))

            try:
                async with kairos:
                    plan = await kairos.prepare(6.0 + n / 150.0, start_baselines)
                    ended = await kairos.measure_schedules(drain)
                    await asyncio.gather(*waiting)  # (b) only once the baselines are done
                    _, fleet_ended = await kairos.measure_fleet(fleet_timeout)
                    runs["Kairos"] = kairos.result(ended, fleet_ended)
            finally:
                await asyncio.gather(*waiting, return_exceptions=True)

        await attempt(result, "Kairos", kairos_part())
    if engines and (plan is None or not interleave):
        hosts = host_ids(m, "cron")
        for engine in engines:  # one after the other: each gets the machine to itself
            first = float(math.ceil(time.time() + 10.0 + n * 0.003))
            alone = CronPlan([(f"cron-{i:07d}", hosts[i]) for i in range(n)], first,
                             occurrences, hosts)  # fmt: skip
            await baselines(alone, [engine], {})
    summarize(ctx, result, runs, n, m, interleave)
    return result


def summarize(ctx: Context, result: ScenarioResult, runs: dict[str, CronRun], n: int, m: int,
              interleave: bool) -> None:  # fmt: skip
    stats = {label: occurrence_lateness(r) for label, r in runs.items()}
    fleets = {label: fleet_out(r) for label, r in runs.items()}
    for label, r in runs.items():
        entry = result.details.setdefault(label, {})
        entry["lateness"] = {k: v for k, v in stats[label].items() if not k.startswith("_")}
        entry["fleet"] = fleets[label]
        entry["first_occurrence"] = iso(r.plan.first)
        entry["expression"] = r.plan.expression
        entry.update({k: v for k, v in r.details.items() if k not in entry})
        if r.runs:
            recorded = recorded_runs(r)
            entry["run_records"] = {k: v for k, v in recorded.items() if not k.startswith("_")}
    scale = "" if n >= 100_000 else f"at {n:,} schedules, not 100k"

    def headline(label: str, key: str, side: str = "issued") -> tuple[float | None, bool]:
        found = stats.get(label)
        if not found:
            return None, False
        if found["unissued_by_end"]:
            bound = "with" if side == "issued" else "received_with"
            return found[f"{bound}_unissued_as_lower_bound_s"].get(key), True
        return found[f"{side}_minus_occurrence_s"].get(key), False

    others = [label for label in runs if label != "Kairos"]
    for key in ("p50", "p99", "max"):
        value, bound = headline("Kairos", key)
        result.figures.append(Figure(
            label=f"{key} occurrence lateness (issued_at − occurrence), {n:,} schedules "
                  "every minute", unit="s", kairos=value,
            baselines={label: headline(label, key)[0] for label in others},
            target=TARGET_P99 if key == "p99" else None,
            target_text="p99 ≤ 1 s for 100k schedules" if key == "p99" else "",
            scale_note=scale if key == "p99" else "", lower_bound=bound))  # fmt: skip
    value, bound = headline("Kairos", "p99", "received")
    result.figures.append(Figure(
        label="p99 occurrence → command received by the fleet", unit="s", kairos=value,
        baselines={label: headline(label, "p99", "received")[0] for label in others},
        lower_bound=bound))  # fmt: skip
    if "Kairos" in runs and runs["Kairos"].runs:
        recorded = recorded_runs(runs["Kairos"])
        fired = recorded["fired_minus_occurrence_s"]
        result.figures.append(Figure(
            label="p99 fired_at − occurrence (Kairos' schedule.run records)", unit="s",
            kairos=fired.get("p99")))  # fmt: skip
        counts = recorded["recorded_per_occurrence"].values()
        result.figures.append(Figure(
            label=f"runs recorded per minute, worst minute (of {n:,} expected)", unit="/min",
            kairos=float(min(counts)) if counts else None,
            baselines={label: float(min(v["commands"] for v in
                                        stats[label]["per_occurrence"].values()))
                       for label in others},
            better="higher", target=float(n), target_text=f"{n:,}/min"))  # fmt: skip
    kairos_fleet = fleets.get("Kairos", {})
    result.figures.append(Figure(
        label=f"one schedule over {m:,} hosts: last command out after the occurrence", unit="s",
        kairos=kairos_fleet.get("last_issued_s"),
        baselines={label: fleets[label].get("last_issued_s") for label in others},
        target=TARGET_FLEET, target_text="≤ 10 s for 100k hosts",
        scale_note="" if m >= 100_000 else f"at {m:,} hosts, not 100k",
        lower_bound=bool(kairos_fleet) and not kairos_fleet.get("complete", False)))  # fmt: skip
    result.notes += notes(ctx, runs, stats, fleets, n, m, interleave)
    png = ctx.plot_path(KEY, "lateness")
    if plot_latency(png, {label: s["_issued"] for label, s in stats.items()},
                    f"Cron: issued_at − occurrence ({ctx.mode}, {n:,} schedules)",
                    "lateness"):  # fmt: skip
        result.plots.append(png.name)
    panels = {}
    for label, r in runs.items():
        issued = per_second([t for t in r.log.issued_at if t >= r.plan.first - 1],
                            origin=r.plan.first)  # fmt: skip
        panels[label] = {"commands issued/s": (issued["t"], issued["count"])}
    markers = {label: {**{f"occurrence {k + 1}": t - r.plan.first
                          for k, t in enumerate(r.plan.instants)},
                       **({"(b)": r.plan.fleet_at - r.plan.first} if r.plan.fleet_at else {})}
               for label, r in runs.items()}  # fmt: skip
    png = ctx.plot_path(KEY, "throughput")
    if plot_panels(png, panels, "Cron: commands issued per second", "per second",
                   xlabel="seconds since the system's first occurrence",
                   markers=markers):  # fmt: skip
        result.plots.append(png.name)


def notes(ctx: Context, runs: dict[str, CronRun], stats: dict[str, Any],
          fleets: dict[str, Any], n: int, m: int, interleave: bool) -> list[str]:  # fmt: skip
    out = [
        f"(a) {n:,} schedules, each `* * * * * S` (every minute at second S) on one host of "
        f"{m:,}; {next(iter(runs.values())).plan.occurrences if runs else 0} occurrences "
        "measured. (b) one schedule over all hosts, fired once. Kairos: one worker, the "
        "fleet answers every command after 0.5–1 s.",
    ]
    if interleave and len(runs) > 1:
        spans = {label: busy_spans(r) for label, r in runs.items()}
        overlaps = []
        labels = list(spans)
        for i, first in enumerate(labels):
            for second in labels[i + 1 :]:
                for a0, a1 in spans[first]:
                    for b0, b1 in spans[second]:
                        if a0 < b1 and b0 < a1:
                            overlaps.append((first, iso(a0), second, iso(b0)))
        out.append(
            "Quick mode interleaves the systems within the same minutes (baselines at "
            f"+{BASELINE_OFFSETS['apscheduler']:.0f} s and +{BASELINE_OFFSETS['heapq']:.0f} s "
            "after Kairos' second, their (b) job "
            f"{FLEET_AFTER_FIRST:.0f} s after their first occurrence); "
            + ("no system was still issuing commands when another's occurrence came."
               if not overlaps else
               f"busy spans overlapped {len(overlaps)} time(s): the figures of those systems "
               "shared the CPU (see details).")
        )  # fmt: skip
        result_spans = {label: [(iso(a), round(b - a, 3)) for a, b in s]
                        for label, s in spans.items()}  # fmt: skip
        out.append(f"Busy spans (occurrence, seconds until its last command): {result_spans}")
    for label, found in stats.items():
        if found["unissued_by_end"]:
            out.append(
                f"{label}: {found['unissued_by_end']:,} of {found['expected']:,} (schedule, "
                "occurrence) pairs had no command when the run ended; they enter the figures "
                "as end of run − occurrence, marked ≥."
            )
    for label, out_b in fleets.items():
        if out_b and not out_b.get("complete"):
            out.append(f"{label}: (b) only {out_b.get('issued', 0):,} of {m:,} commands were "
                       "out when the run stopped; the figure is a lower bound.")  # fmt: skip
    if ctx.quick:
        out.append(f"Quick mode: {n:,} schedules and {m:,} hosts instead of 100,000 each.")
    return out
