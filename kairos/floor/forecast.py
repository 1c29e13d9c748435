"""Will the cap keep the promise? A forecast of the scan load over the next hours, pure.

Given every scannable host (when it is due, its interval, when it was last scanned), the
commands generic schedules will send, the cap on concurrent scans and the measured scan
duration (agent start to result, or command issue to result when the agent sent no start),
`forecast` replays the coming hours as the dispatcher would if nothing changed: `cap` slots;
commands start in due order (earlier first, then higher priority, then host id) as soon as a
slot is free, except that with the promise guard a host whose promise runs out within it
starts first, earliest deadline first; each scan takes the median measured duration; an
adaptive host's next scan is due its interval after its scan ends. It answers, per hour, how
many commands come due and how many the cap can run, and which hosts would be scanned later
than promised: later than their last scan plus the promise (48 h), or plus their interval
when that is longer.

Shared by the API (it reads the inputs from the read model) and tests; no I/O, no clock.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

PROMISE = timedelta(hours=48)
DEFAULT_SCAN_SECONDS = 300.0
"""The scan duration assumed before any result has been measured."""


@dataclass(frozen=True)
class HostLoad:
    """One scannable host as the adaptive schedule sees it."""

    host_id: str
    due_at: datetime
    interval: timedelta
    last_scan_completed: datetime | None = None
    priority: int = 5


@dataclass(frozen=True)
class ScheduledLoad:
    """Commands a generic schedule sends at one occurrence (one per targeted host)."""

    schedule_id: str
    fire_at: datetime
    commands: int
    priority: int = 5


@dataclass(frozen=True)
class HourLoad:
    start: datetime
    adaptive_due: int
    scheduled_due: int
    capacity: int
    """Scans the cap completes in an hour at the median duration."""
    capacity_p90: int
    """The same at the 90th percentile duration: what a slow hour gives."""
    started: int
    backlog: int
    """Commands due by the hour's end and not yet started."""

    @property
    def due(self) -> int:
        return self.adaptive_due + self.scheduled_due


@dataclass(frozen=True)
class PromiseMiss:
    host_id: str
    deadline: datetime
    starts_at: datetime | None
    """When the forecast starts its scan; None: not within the horizon."""


@dataclass(frozen=True)
class Forecast:
    start: datetime
    hours: int
    max_concurrent_scans: int
    scan_seconds_p50: float
    scan_seconds_p90: float
    measured_scans: int
    hourly: tuple[HourLoad, ...]
    misses: tuple[PromiseMiss, ...]

    @property
    def promise_kept(self) -> bool:
        return not self.misses


def measured_scan_seconds(
    completed_at: datetime, *, started_at: datetime | None, issued_at: datetime | None
) -> float | None:
    """How long one successful scan took, from what its result and command say.

    From the agent's `started_at` when it sent one; otherwise from when the command was
    issued, which adds the time the command waited to be taken (a little long, never short).
    None when neither is known or the span is not positive (clocks that disagree).
    """
    began = started_at if started_at is not None else issued_at
    if began is None:
        return None
    seconds = (completed_at - began).total_seconds()
    return seconds if seconds > 0 else None


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (`fraction` in (0, 1]) of `values`, which must not be empty."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def deadline_of(host: HostLoad, promise: timedelta) -> datetime:
    """The latest a host's next scan may start: the promise (or its longer interval) after
    its last scan; a host never scanned counts from when it is due."""
    base = host.last_scan_completed or host.due_at
    return base + max(promise, host.interval)


def _guarded_first(
    guarded: list[tuple[datetime, str, datetime]],
    waiting: dict[str, datetime],
    at: datetime,
    guard: timedelta,
) -> tuple[datetime, str, datetime] | None:
    """The waiting host that must start at `at` ahead of every other: due by then, with its
    promise running out within `guard`; earliest deadline first. Popped when returned."""
    while guarded and waiting.get(guarded[0][1]) != guarded[0][2]:
        heapq.heappop(guarded)  # Started since: a stale entry.
    if not guarded:
        return None
    deadline, _, due = guarded[0]
    if due <= at and deadline - at <= guard:
        return heapq.heappop(guarded)
    return None


def forecast(
    *,
    now: datetime,
    hours: int,
    hosts: Iterable[HostLoad],
    scheduled: Iterable[ScheduledLoad],
    max_concurrent_scans: int,
    scan_seconds: Sequence[float],
    promise: timedelta = PROMISE,
    promise_guard: timedelta = timedelta(0),
) -> Forecast:
    """The coming `hours` from `now`, if nothing changes (see the module docstring).

    With `promise_guard`, a waiting host whose promise runs out within it when a slot frees
    starts first, earliest deadline first, as the dispatcher ranks it."""
    horizon = now + timedelta(hours=hours)
    p50 = percentile(scan_seconds, 0.5) if scan_seconds else DEFAULT_SCAN_SECONDS
    p90 = percentile(scan_seconds, 0.9) if scan_seconds else DEFAULT_SCAN_SECONDS
    duration = timedelta(seconds=p50)
    cap = max(max_concurrent_scans, 0)

    adaptive_due = [0] * hours
    scheduled_due = [0] * hours
    started = [0] * hours

    def hour_of(instant: datetime) -> int:
        return max(0, int((instant - now).total_seconds() // 3600))

    # Waiting commands: (due, -priority, tie, host or None, count) — a scheduled occurrence's
    # commands wait together and start one by one.
    queue: list[tuple[datetime, int, str, int, str | None]] = []
    hosts_by_id = {host.host_id: host for host in hosts}
    waiting: dict[str, datetime] = {}
    """Each waiting host's due time: a host's entry in `queue` or `guarded` is current only
    while it matches."""
    guarded: list[tuple[datetime, str, datetime]] = []
    """Waiting hosts by the deadline of their promise, when the guard is on."""

    def enqueue(host: HostLoad, due: datetime, last_scan: datetime | None) -> None:
        waiting[host.host_id] = due
        heapq.heappush(queue, (due, -host.priority, host.host_id, 1, host.host_id))
        if promise_guard:
            base = last_scan or due
            heapq.heappush(guarded, (base + max(promise, host.interval), host.host_id, due))

    for host in hosts_by_id.values():
        enqueue(host, max(host.due_at, now), host.last_scan_completed)
    for number, load in enumerate(scheduled):
        if now <= load.fire_at < horizon and load.commands > 0:
            tie = f"~{load.schedule_id}/{number}"
            heapq.heappush(queue, (load.fire_at, -load.priority, tie, load.commands, None))

    slots = [now] * cap  # When each slot is next free.
    heapq.heapify(slots)
    first_start: dict[str, datetime] = {}
    counted: set[tuple[str, datetime]] = set()
    while queue and cap:
        head = queue[0]
        if head[4] is not None and waiting.get(head[4]) != head[0]:
            heapq.heappop(queue)  # A host started from the guarded heap.
            continue
        entry = _guarded_first(guarded, waiting, max(head[0], slots[0]), promise_guard)
        chosen: tuple[datetime, int, str, int, str | None]
        if entry is not None:
            guarded_host = hosts_by_id[entry[1]]
            chosen = (entry[2], -guarded_host.priority, entry[1], 1, entry[1])
        else:
            chosen = heapq.heappop(queue)
        due, negative_priority, tie, count, host_id = chosen
        if due >= horizon:
            break
        if (tie, due) not in counted:
            counted.add((tie, due))
            if host_id is None:
                scheduled_due[hour_of(due)] += count
            else:
                adaptive_due[hour_of(due)] += 1
        free = heapq.heappop(slots)
        begins = max(due, free)
        if begins >= horizon:
            heapq.heappush(slots, free)
            break
        ends = begins + duration
        heapq.heappush(slots, ends)
        started[hour_of(begins)] += 1
        if host_id is None:
            if count > 1:
                heapq.heappush(queue, (due, negative_priority, tie, count - 1, None))
            continue
        first_start.setdefault(host_id, begins)
        host = hosts_by_id[host_id]
        del waiting[host_id]
        enqueue(host, ends + host.interval, ends)
    # What is left waiting was due within the horizon but never started.
    for due, _, tie, count, host_id in queue:
        if host_id is not None and waiting.get(host_id) != due:
            continue
        if due < horizon and (tie, due) not in counted:
            counted.add((tie, due))
            if host_id is None:
                scheduled_due[hour_of(due)] += count
            else:
                adaptive_due[hour_of(due)] += 1

    misses = []
    for host in sorted(hosts_by_id.values(), key=lambda h: h.host_id):
        deadline = deadline_of(host, promise)
        first = first_start.get(host.host_id)
        if deadline < horizon and (first is None or first > deadline):
            misses.append(PromiseMiss(host.host_id, deadline, first))

    per_hour = int(cap * 3600 // p50) if p50 > 0 else 0
    per_hour_p90 = int(cap * 3600 // p90) if p90 > 0 else 0
    hourly = []
    backlog = 0
    for hour in range(hours):
        backlog += adaptive_due[hour] + scheduled_due[hour] - started[hour]
        hourly.append(
            HourLoad(
                start=now + timedelta(hours=hour),
                adaptive_due=adaptive_due[hour],
                scheduled_due=scheduled_due[hour],
                capacity=per_hour,
                capacity_p90=per_hour_p90,
                started=started[hour],
                backlog=max(backlog, 0),
            )
        )
    return Forecast(
        start=now,
        hours=hours,
        max_concurrent_scans=max_concurrent_scans,
        scan_seconds_p50=p50,
        scan_seconds_p90=p90,
        measured_scans=len(scan_seconds),
        hourly=tuple(hourly),
        misses=tuple(misses),
    )
