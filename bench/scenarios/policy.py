"""11. Policy simulator: days of dispatch on a virtual clock, today's ranks against the new.

`python -m bench policy [--hosts N] [--days D] [--capacity 0.6,0.8,1.0,1.2] [--seed S]
[--quick]` runs the REAL pure host policy (`streams.policy.host.decide`, `wake_at`) and the
REAL `DispatchQueue` with no broker, no database and no sleeping: scans end, fail and time out
as events on a virtual clock. The fleet is generated from `--seed`:

- five organizations of very different sizes, each with its own mix of compliance scores;
- scores that drift (mean-reverting around each host's own level, with rare critical
  findings), so hosts change state and interval;
- scan durations with a long tail (log-normal; the few past the scan timeout time out), and
  5 % of scans failing (the policy retries them after `retry_delay_seconds`);
- two generic schedules of other scanners over parts of the fleet, queued as
  `DispatchRequested` with their scanner and priority and no organization (as the schedule
  fan-out sends them): a daily port scan (priority 5, the schedule default) over 40 % of the
  hosts and a six-hourly inventory (priority 3) over 20 %;
- new hosts: a steady trickle in every organization (1 % of its hosts a day) and one
  onboarding of 20 % of the fleet, all in the largest organization, a quarter of the way in:
  top-priority first scans, the onboarding's all due at once. This is where the turn between
  organizations shows: without it, the small organizations' new hosts wait behind the big
  one's onboarding.

Capacity (`max_concurrent_scans`) is set to a fraction of the demand: the slots the fleet
needs to scan every host at its state's configured interval plus the schedules, at the mean
scan duration. Each capacity runs twice from the same seed: `today` (static priority, one cap,
no fairness between organizations, no promise guard: the queue with requests stripped of
their organization and `promise_guard_minutes=0`; commands of different scanners at equal
priority take turns in both, as the queue's scanner pools have them) and `fair+guard` (organizations in turn,
`promise_guard_minutes` from the config's default).

Per run: hosts that went past the 48 h promise, each state's actual intervals against its
configured one, the wait for a slot per priority (p50/p99), and Jain's fairness index over
each organization's scans done / scans owed at its hosts' configured intervals. Writes a
Markdown table, JSON and a PNG under bench/results and prints the table.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from schemas.base import CommandReason, ComplianceState
from schemas.config import SchedulerConfig
from schemas.internal import CommandTimedOut, DispatchRequested, HostDue, ReleaseOutcome
from schemas.objects import ObjectAttributes, ObjectEvent, Operation
from schemas.results import ScanCompleted, ScanStatus
from schemas.state import HostSchedule
from streams.policy.compliance import compliance_state, interval_minutes
from streams.policy.dispatch import DispatchQueue
from streams.policy.host import decide, wake_at

KEY, NUMBER, TITLE = "policy", 11, "Policy simulator"
RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"
START = datetime(2030, 1, 7, 0, 0, tzinfo=UTC)
ADAPTIVE = "compliance"
ORGANIZATION_SHARES = (0.62, 0.22, 0.10, 0.05, 0.01)
"""Five organizations of very different sizes (fractions of the fleet)."""
ORGANIZATION_LEVELS = (88.0, 72.0, 93.0, 55.0, 80.0)
"""Each organization's mean host score: different state mixes."""
DURATION_MEDIAN_SECONDS = 90.0
DURATION_SIGMA = 0.8
"""Log-normal scan durations: median 90 s, p99 about 9 minutes, a few past the timeout."""
FAILURE_RATE = 0.05
CRITICAL_FINDING_RATE = 0.01
"""Chance a scan finds a failed critical rule whatever the score (a new exposure)."""
ONBOARDED_SHARE = 0.20
TRICKLE_PER_DAY = 0.01
INTERVAL_SLACK = timedelta(minutes=15)
"""An interval counts as kept within its configured length plus this (a scan takes time)."""
STATES = (
    ComplianceState.CRITICAL,
    ComplianceState.LOW,
    ComplianceState.PARTIAL,
    ComplianceState.MOSTLY_COMPLIANT,
    ComplianceState.COMPLIANT,
)


@dataclass(frozen=True)
class GenericSchedule:
    name: str
    scanner: str
    priority: int
    every: timedelta
    share: float
    first_at: timedelta


SCHEDULES = (
    GenericSchedule("port-scan", "nmap", 5, timedelta(days=1), 0.40, timedelta(hours=2)),
    GenericSchedule("inventory", "inventory", 3, timedelta(hours=6), 0.20, timedelta(minutes=30)),
)


@dataclass(frozen=True)
class Policy:
    name: str
    fair: bool
    promise_guard_minutes: int
    org_cap: int | None = None


def policies(config: SchedulerConfig) -> tuple[Policy, Policy]:
    return (
        Policy("today", fair=False, promise_guard_minutes=0),
        Policy("fair+guard", fair=True, promise_guard_minutes=config.promise_guard_minutes),
    )


@dataclass
class Host:
    host_id: str
    organization: str
    level: float
    score: float
    schedule: HostSchedule
    wake_token: int = 0
    state_since: datetime = START


@dataclass
class RunResult:
    policy: str
    capacity: float
    cap: int
    hosts: int
    days: float
    hosts_past_promise: int
    promise_breaks: int
    intervals: dict[str, dict[str, float]]
    waits: dict[int, dict[str, float]]
    organizations: dict[str, dict[str, float]]
    jain: float
    issued: int
    timed_out: int
    seconds: float
    waiting_at_end: int


@dataclass
class Fleet:
    hosts: list[Host]
    onboarded: list[tuple[timedelta, str, str, float]]
    """(when from the start, host_id, organization, level) of the hosts created later."""
    schedule_targets: dict[str, list[int]] = field(default_factory=dict)


# --- the fleet ---------------------------------------------------------------------


def _organization(rng: random.Random) -> int:
    pick = rng.random()
    for index, share in enumerate(ORGANIZATION_SHARES):
        pick -= share
        if pick < 0:
            return index
    return len(ORGANIZATION_SHARES) - 1


def _host_level(rng: random.Random, organization: int) -> float:
    return min(100.0, max(0.0, rng.gauss(ORGANIZATION_LEVELS[organization], 22.0)))


def _created(
    host_id: str, organization: str, at: datetime, config: SchedulerConfig
) -> HostSchedule:
    event = ObjectEvent(
        event_id=_uuid(f"created/{host_id}"),
        object_type="host",
        object_id=host_id,
        operation=Operation.CREATED,
        occurred_at=at,
        attributes=ObjectAttributes(organization=organization),
    )
    schedule = decide(None, event, now=at, config=config).schedule
    assert schedule is not None
    return schedule


def _uuid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"kairos-bench-policy/{name}")


def _state(score: float, critical: bool) -> ComplianceState:
    result = _result("x", "c", at=START, score=score, critical=critical, failed=False)
    return compliance_state(result)


def build_fleet(
    hosts: int,
    seed: int,
    config: SchedulerConfig,
    days: float = 3.0,
    onboarded_share: float = ONBOARDED_SHARE,
) -> Fleet:
    """`hosts` hosts in steady state at START: each with a last scan up to one interval ago
    (so the fleet's next scans are spread), plus the hosts onboarded later."""
    rng = random.Random(seed)
    fleet: list[Host] = []
    for number in range(hosts):
        organization = _organization(rng)
        level = _host_level(rng, organization)
        score = min(100.0, max(0.0, rng.gauss(level, 6.0)))
        host_id = f"host-{number:06d}"
        org_name = f"org-{organization + 1}"
        created = _created(host_id, org_name, START - timedelta(days=30), config)
        state = _state(score, critical=rng.random() < CRITICAL_FINDING_RATE)
        interval = timedelta(minutes=interval_minutes(state, config))
        last = START - interval * rng.random()
        schedule = created.model_copy(
            update={
                "state": state,
                "compliance_state": state,
                "score": score,
                "current_interval_minutes": interval_minutes(state, config),
                "scan_priority": config.priority(state),
                "last_scan_completed": last,
                "next_scheduled_scan": last + interval,
                "due_instance": 2,
                "in_flight": None,  # Its first scan's claim, long done.
            }
        )
        fleet.append(Host(host_id, org_name, level, score, schedule))
    onboarded = []
    burst_at = timedelta(days=days) / 4
    for number in range(int(hosts * onboarded_share)):
        onboarded.append((burst_at, f"new-{number:06d}", "org-1", _host_level(rng, 0)))
    for organization, share in enumerate(ORGANIZATION_SHARES):
        for number in range(max(1, round(hosts * share * TRICKLE_PER_DAY * days))):
            when = timedelta(days=days) * rng.random()
            host_id = f"added-{organization + 1}-{number:05d}"
            onboarded.append(
                (when, host_id, f"org-{organization + 1}", _host_level(rng, organization))
            )
    targets = {
        schedule.name: sorted(rng.sample(range(hosts), int(hosts * schedule.share)))
        for schedule in SCHEDULES
    }
    return Fleet(fleet, onboarded, targets)


def mean_duration_seconds() -> float:
    return DURATION_MEDIAN_SECONDS * math.exp(DURATION_SIGMA**2 / 2)


def demand_slots(fleet: Fleet, config: SchedulerConfig) -> float:
    """Slots busy on average if every host is scanned at its configured interval and every
    schedule runs: the capacity that is 100 %. Onboarded hosts count at the fleet's mix."""
    mean = mean_duration_seconds() * (1 + FAILURE_RATE)
    per_host = [
        mean / (interval_minutes(host.schedule.compliance_state, config) * 60)
        for host in fleet.hosts
    ]
    hosts = sum(per_host) * (1 + len(fleet.onboarded) / max(1, len(fleet.hosts)))
    schedules = sum(
        len(fleet.schedule_targets[s.name]) * mean_duration_seconds() / s.every.total_seconds()
        for s in SCHEDULES
    )
    return hosts + schedules


# --- one run -------------------------------------------------------------------------


def _result(
    command_id: str, host_id: str, *, at: datetime, score: float, critical: bool, failed: bool
) -> ScanCompleted:
    if failed:
        return ScanCompleted(
            event_id=_uuid(f"result/{command_id}"),
            command_id=command_id,
            host_id=host_id,
            status=ScanStatus.FAILED,
            completed_at=at,
            error="scan failed",
        )
    return ScanCompleted(
        event_id=_uuid(f"result/{command_id}"),
        command_id=command_id,
        host_id=host_id,
        status=ScanStatus.SUCCEEDED,
        completed_at=at,
        score=round(score, 1),
        severity_critical_failed=1 if critical else 0,
        scan_id=f"scan-{command_id}",
    )


def _percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return ordered[index]


def jain(values: Iterable[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything."""
    xs = list(values)
    squares = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * squares) if squares else float("nan")


def simulate(
    fleet: Fleet,
    *,
    policy: Policy,
    capacity: float,
    days: float,
    seed: int,
    config: SchedulerConfig,
) -> RunResult:
    """Run `days` of scheduler time; the same seed gives the same durations, failures and
    drift to both policies (one random stream per host and scanner)."""
    wall = time.perf_counter()
    cap = max(1, round(capacity * demand_slots(fleet, config)))
    end = START + timedelta(days=days)
    timeout = timedelta(seconds=config.scan_timeout_seconds)
    max_interval = timedelta(minutes=config.max_interval_minutes)
    queue = DispatchQueue()
    hosts = {h.host_id: _copy_host(h) for h in fleet.hosts}
    streams: dict[str, random.Random] = {}

    def stream(key: str) -> random.Random:
        rng = streams.get(key)
        if rng is None:
            rng = streams[key] = random.Random(f"{seed}/{key}")
        return rng

    events: list[tuple[datetime, int, str, Any]] = []
    sequence = 0

    def at(when: datetime, kind: str, data: Any) -> None:
        nonlocal sequence
        sequence += 1
        heapq.heappush(events, (when, sequence, kind, data))

    waits: dict[int, list[float]] = defaultdict(list)
    first_waits: dict[str, list[float]] = defaultdict(list)
    """Per organization: how long new hosts' first scans waited for a slot."""
    intervals: dict[ComplianceState, list[float]] = defaultdict(list)
    kept: Counter[ComplianceState] = Counter()
    owed: Counter[str] = Counter()
    done: Counter[str] = Counter()
    past_promise: set[str] = set()
    promise_breaks = 0
    issued_total = 0
    timed_out = 0
    generic_busy: dict[tuple[str, int], str] = {}
    """(schedule, host index) -> its command waiting or in flight (overlap: skip)."""
    generic_of: dict[str, tuple[str, int]] = {}

    def accrue(host: Host, now: datetime) -> None:
        state = host.schedule.compliance_state
        if state is not ComplianceState.UNKNOWN:
            minutes = interval_minutes(state, config)
            owed[host.organization] += (now - host.state_since) / timedelta(minutes=minutes)
        host.state_since = now

    def plan_wake(host: Host, now: datetime) -> None:
        wake = wake_at(host.schedule, config)
        host.wake_token += 1
        if wake is not None:
            at(max(wake, now), "wake", (host.host_id, host.wake_token))

    def apply(host: Host, event: Any, now: datetime) -> None:
        before = host.schedule
        decision = decide(before, event, now=now, config=config)
        if decision.schedule is None:
            return
        host.schedule = decision.schedule
        for request in decision.dispatch:
            queue.request(_shaped(request, policy))
        for release in decision.releases:
            queue.release(release.command_id, release.outcome)
        if before is not None and decision.schedule.compliance_state is not before.compliance_state:
            accrue(host, now)
        if decision.changed:
            plan_wake(host, now)

    for host in hosts.values():
        plan_wake(host, START)
    for schedule in SCHEDULES:
        at(START + schedule.first_at, "fire", schedule)
    for offset, host_id, organization, level in fleet.onboarded:
        at(START + offset, "onboard", (host_id, organization, level))

    def dispatch(now: datetime) -> None:
        nonlocal issued_total, timed_out
        for expired in queue.expire(now):
            timed_out += 1
            generic = generic_of.pop(expired.command_id, None)
            if generic is not None:
                generic_busy.pop(generic, None)
                continue
            signal = CommandTimedOut(
                host_id=expired.host_id, command_id=expired.command_id, deadline=now
            )
            apply(hosts[expired.host_id], signal, now)
        issued = queue.issue(
            now=now,
            cap=cap,
            timeout=timeout,
            aging_minutes=config.priority_aging_minutes,
            org_cap=policy.org_cap,
            promise_guard_minutes=policy.promise_guard_minutes,
        )
        for item in issued:
            request = item.request
            issued_total += 1
            waits[request.priority].append((now - request.due_at).total_seconds())
            if request.reason is CommandReason.UNKNOWN and request.attempt == 1:
                host = hosts[request.host_id]
                first_waits[host.organization].append((now - request.due_at).total_seconds())
            rng = stream(f"{request.scanner}/{request.host_id}")
            duration = timedelta(
                seconds=rng.lognormvariate(math.log(DURATION_MEDIAN_SECONDS), DURATION_SIGMA)
            )
            failed = rng.random() < FAILURE_RATE
            if duration < timeout:
                at(now + duration, "done", (request, failed))
            # Else no result comes: the queue expires the command at its deadline.

    while events and events[0][0] <= end:
        now = events[0][0]
        while events and events[0][0] == now:
            _, _, kind, data = heapq.heappop(events)
            if kind == "wake":
                host_id, token = data
                host = hosts[host_id]
                if token == host.wake_token:
                    apply(host, HostDue(host_id=host_id, wake_at=now), now)
            elif kind == "done":
                request, failed = data
                generic = generic_of.pop(request.command_id, None)
                if generic is not None:
                    generic_busy.pop(generic, None)
                    outcome = ReleaseOutcome.FAILED if failed else ReleaseOutcome.COMPLETED
                    queue.release(request.command_id, outcome)
                    continue
                host = hosts[request.host_id]
                in_flight = host.schedule.in_flight
                if in_flight is None or in_flight.command_id != request.command_id:
                    continue  # Timed out meanwhile: the late result is stale.
                before = host.schedule
                rng = stream(f"drift/{host.host_id}")
                host.score = min(
                    100.0,
                    max(0.0, host.score + 0.2 * (host.level - host.score) + rng.gauss(0, 7)),
                )
                critical = rng.random() < CRITICAL_FINDING_RATE
                result = _result(
                    request.command_id,
                    host.host_id,
                    at=now,
                    score=host.score,
                    critical=critical,
                    failed=failed,
                )
                apply(host, result, now)
                if failed or before.last_scan_completed is None:
                    continue
                state = before.compliance_state
                if state is ComplianceState.UNKNOWN:
                    continue
                done[host.organization] += 1
                actual = now - before.last_scan_completed
                intervals[state].append(actual / timedelta(minutes=1))
                if actual <= timedelta(minutes=interval_minutes(state, config)) + INTERVAL_SLACK:
                    kept[state] += 1
                if actual > max_interval:
                    promise_breaks += 1
                    past_promise.add(host.host_id)
            elif kind == "fire":
                schedule = data
                for index in fleet.schedule_targets[schedule.name]:
                    key = (schedule.name, index)
                    if key in generic_busy:
                        continue  # Overlap: the last run's command for this host is not done.
                    host_id = fleet.hosts[index].host_id
                    command = f"{schedule.name}/{now.isoformat()}/{host_id}"
                    request = DispatchRequested(
                        command_id=command,
                        host_id=host_id,
                        priority=schedule.priority,
                        due_at=now,
                        reason=CommandReason.SCHEDULE,
                        state=ComplianceState.UNKNOWN,
                        attempt=1,
                        scanner=schedule.scanner,
                        schedule_id=schedule.name,
                    )
                    if queue.request(request):
                        generic_busy[key] = command
                        generic_of[command] = key
                at(now + schedule.every, "fire", schedule)
            elif kind == "onboard":
                host_id, organization, level = data
                host = Host(host_id, organization, level, level, None, state_since=now)  # type: ignore[arg-type]
                hosts[host_id] = host
                created = ObjectEvent(
                    event_id=_uuid(f"created/{host_id}"),
                    object_type="host",
                    object_id=host_id,
                    operation=Operation.CREATED,
                    occurred_at=now,
                    attributes=ObjectAttributes(organization=organization),
                )
                apply(host, created, now)
        dispatch(now)

    for host in hosts.values():
        accrue(host, end)
        last = host.schedule.last_scan_completed or host.schedule.created_at
        if last + max_interval < end:
            past_promise.add(host.host_id)
    organizations = {
        name: {
            "hosts": sum(1 for h in hosts.values() if h.organization == name),
            "owed": owed[name],
            "done": done[name],
            "ratio": done[name] / owed[name] if owed[name] else float("nan"),
            "first_scans": len(first_waits[name]),
            "first_wait_p50": _percentile(first_waits[name], 0.50),
            "first_wait_p99": _percentile(first_waits[name], 0.99),
            "first_wait_max": max(first_waits[name], default=float("nan")),
        }
        for name in sorted(owed)
    }
    return RunResult(
        policy=policy.name,
        capacity=capacity,
        cap=cap,
        hosts=len(hosts),
        days=days,
        hosts_past_promise=len(past_promise),
        promise_breaks=promise_breaks,
        intervals={
            state.value: {
                "configured": interval_minutes(state, config),
                "p50": _percentile(intervals[state], 0.50),
                "p95": _percentile(intervals[state], 0.95),
                "max": max(intervals[state], default=float("nan")),
                "kept": kept[state] / len(intervals[state]) if intervals[state] else float("nan"),
                "count": len(intervals[state]),
            }
            for state in STATES
        },
        waits={
            priority: {
                "p50": _percentile(values, 0.50),
                "p99": _percentile(values, 0.99),
                "count": len(values),
            }
            for priority, values in sorted(waits.items(), reverse=True)
        },
        organizations=organizations,
        jain=jain(o["ratio"] for o in organizations.values()),
        issued=issued_total,
        timed_out=timed_out,
        seconds=time.perf_counter() - wall,
        waiting_at_end=queue.waiting_count,
    )


def _copy_host(host: Host) -> Host:
    return Host(host.host_id, host.organization, host.level, host.score, host.schedule)


def _shaped(request: DispatchRequested, policy: Policy) -> DispatchRequested:
    """Today's policy knows no organization: every command shares one turn."""
    if policy.fair:
        return request
    return request.model_copy(update={"organization": None})


# --- report --------------------------------------------------------------------------


def _minutes(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value / 60:.1f} h" if value >= 120 else f"{value:.0f} min"


def _seconds(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return _minutes(value / 60) if value >= 60 else f"{value:.0f} s"


def markdown(results: list[RunResult], command: str) -> str:
    out = [f"Command: `{command}`", ""]
    out += [
        "| capacity | policy | slots | hosts past the 48 h promise | critical kept (p95) "
        "| low kept (p95) | compliant p95 | Jain (done/owed per org) | waiting at end |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        critical = r.intervals["critical"]
        low = r.intervals["low"]
        compliant = r.intervals["compliant"]
        out.append(
            f"| {r.capacity:.0%} | {r.policy} | {r.cap} | {r.hosts_past_promise} of {r.hosts} "
            f"| {critical['kept']:.1%} ({_minutes(critical['p95'])}) "
            f"| {low['kept']:.1%} ({_minutes(low['p95'])}) "
            f"| {_minutes(compliant['p95'])} | {r.jain:.3f} | {r.waiting_at_end} |"
        )
    out += ["", "Actual intervals per state, p50 / p95 (configured):", ""]
    out.append("| capacity | policy | " + " | ".join(s.value for s in STATES) + " |")
    out.append("|---|---|" + "---|" * len(STATES))
    for r in results:
        cells = [
            f"{_minutes(r.intervals[s.value]['p50'])} / {_minutes(r.intervals[s.value]['p95'])}"
            f" ({_minutes(r.intervals[s.value]['configured'])})"
            for s in STATES
        ]
        out.append(f"| {r.capacity:.0%} | {r.policy} | " + " | ".join(cells) + " |")
    priorities = sorted({p for r in results for p in r.waits}, reverse=True)
    out += ["", "Wait for a slot per priority, p50 / p99:", ""]
    out.append("| capacity | policy | " + " | ".join(f"prio {p}" for p in priorities) + " |")
    out.append("|---|---|" + "---|" * len(priorities))
    for r in results:
        cells = [
            f"{_seconds(r.waits[p]['p50'])} / {_seconds(r.waits[p]['p99'])}"
            if p in r.waits
            else "–"
            for p in priorities
        ]
        out.append(f"| {r.capacity:.0%} | {r.policy} | " + " | ".join(cells) + " |")
    organizations = sorted({o for r in results for o in r.organizations})
    out += [
        "",
        "Per organization (hosts at the end): scans done / owed at the configured intervals,"
        " and in brackets the longest wait of a new host's first scan for a slot:",
        "",
    ]
    first = results[0].organizations
    out.append(
        "| capacity | policy | "
        + " | ".join(f"{o} ({first[o]['hosts']:.0f})" for o in organizations)
        + " |"
    )
    out.append("|---|---|" + "---|" * len(organizations))
    for r in results:
        cells = [
            f"{r.organizations[o]['ratio']:.2f} ({_seconds(r.organizations[o]['first_wait_max'])})"
            for o in organizations
        ]
        out.append(f"| {r.capacity:.0%} | {r.policy} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def smaller_first_wait(result: RunResult) -> float:
    """The longest a new host of any organization but the largest waited for its first scan."""
    organizations = result.organizations
    largest = max(organizations, key=lambda name: organizations[name]["hosts"])
    waits = [
        o["first_wait_max"]
        for name, o in organizations.items()
        if name != largest and not math.isnan(o["first_wait_max"])
    ]
    return max(waits, default=float("nan"))


def plot(results: list[RunResult], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = sorted({r.policy for r in results}, key=lambda n: n != "today")
    figure, axes = plt.subplots(1, 4, figsize=(19, 4.2))
    for name in names:
        runs = [r for r in results if r.policy == name]
        xs = [r.capacity * 100 for r in runs]
        axes[0].plot(xs, [r.hosts_past_promise for r in runs], marker="o", label=name)
        axes[1].plot(
            xs, [r.intervals["critical"]["kept"] * 100 for r in runs], marker="o", label=name
        )
        axes[2].plot(xs, [r.jain for r in runs], marker="o", label=name)
        axes[3].plot(xs, [smaller_first_wait(r) / 60 for r in runs], marker="o", label=name)
    titles = (
        "hosts past the 48 h promise",
        "critical intervals kept (%)",
        "Jain index, scans done/owed per org",
        "longest first-scan wait, smaller orgs (min)",
    )
    for axis, title in zip(axes, titles, strict=True):
        axis.set_title(title)
        axis.set_xlabel("capacity (% of demand)")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True


def run_all(
    *,
    hosts: int,
    days: float,
    capacities: Sequence[float],
    seed: int,
    onboarded_share: float = ONBOARDED_SHARE,
) -> list[RunResult]:
    config = SchedulerConfig()
    fleet = build_fleet(hosts, seed, config, days, onboarded_share)
    results = []
    for capacity in capacities:
        for policy in policies(config):
            result = simulate(
                fleet, policy=policy, capacity=capacity, days=days, seed=seed, config=config
            )
            print(
                f"  {capacity:.0%} {policy.name}: {result.hosts_past_promise} past promise,"
                f" Jain {result.jain:.3f}, {result.issued} issued in {result.seconds:.1f} s",
                file=sys.stderr,
            )
            results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench policy", description=TITLE)
    parser.add_argument("--hosts", type=int, default=20_000)
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--capacity", default="0.6,0.8,1.0,1.2")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--onboarding",
        type=float,
        default=ONBOARDED_SHARE,
        help="hosts onboarded at once in the largest organization, as a share of the fleet",
    )
    parser.add_argument("--quick", action="store_true", help="2,000 hosts, 1 day")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.quick:
        args.hosts, args.days = 2_000, 1.0
    capacities = [float(c) for c in args.capacity.split(",") if c]
    command = (
        f"python -m bench policy --hosts {args.hosts} --days {args.days:g}"
        f" --capacity {args.capacity} --seed {args.seed}"
        + (f" --onboarding {args.onboarding:g}" if args.onboarding != ONBOARDED_SHARE else "")
    )
    results = run_all(
        hosts=args.hosts,
        days=args.days,
        capacities=capacities,
        seed=args.seed,
        onboarded_share=args.onboarding,
    )
    table = markdown(results, command)
    print(table)
    args.results.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d-%H%M%S")
    base = args.results / f"policy-{stamp}"
    base.with_suffix(".md").write_text(f"# {NUMBER}. {TITLE}\n\n{table}", encoding="utf-8")
    base.with_suffix(".json").write_text(
        json.dumps([asdict(r) for r in results], indent=2, default=str) + "\n", encoding="utf-8"
    )
    png = args.results / f"policy-{stamp}.png"
    if plot(results, png):
        print(f"plot: {png}", file=sys.stderr)
    print(f"written: {base}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
