"""What the scenarios share: the run context, priming a fleet, lateness from commands."""

from __future__ import annotations

import asyncio
import math
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from bench.fleet import FleetProfile, ScannerFleet
from bench.kafka_io import CommandLog, Offsets, start_producer, wait_until
from bench.load import host_ids, onboard
from bench.metrics import distribution, per_second
from bench.report import ScenarioResult
from bench.stack import BenchStack
from bench.systems import System
from bench.ui import BenchUI

T = TypeVar("T")
COMPLIANT_INTERVAL = timedelta(minutes=1440)  # SchedulerConfig.interval_compliant default
CAP = 100_000


@dataclass
class Context:
    stack: BenchStack
    ui: BenchUI
    quick: bool
    scale: int | None
    out_dir: Path
    when: str
    plots: list[str] = field(default_factory=list)

    @property
    def mode(self) -> str:
        return "quick" if self.quick else "full"

    def size(self, quick: int, full: int) -> int:
        if self.scale:
            return self.scale
        return quick if self.quick else full

    def plot_path(self, key: str, name: str) -> Path:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return self.out_dir / f"{key}-{self.when}-{name}.png"


async def attempt(result: ScenarioResult, label: str, run: Awaitable[T]) -> T | None:
    """Run one system's part; a failure becomes a note, and the other systems still count."""
    try:
        return await run
    except Exception as error:  # noqa: BLE001 - reported in the result, never hidden
        result.notes.append(f"{label} failed: {type(error).__name__}: {str(error)[:1500]}")
        result.details.setdefault("failures", {})[label] = traceback.format_exc()[-4000:]
        return None


def new_result(ctx: Context, key: str, number: int, title: str, **params: Any) -> ScenarioResult:
    return ScenarioResult(key=key, number=number, title=title, mode=ctx.mode, params=params)


@dataclass
class Primed:
    hosts: list[str]
    onboard_started: float
    commands_held_at: float
    caught_up_at: float

    @property
    def seconds(self) -> float:
        return self.commands_held_at - self.onboard_started


async def prime(
    ctx: Context, system: System, fleet: ScannerFleet, n: int, *, timeout: float | None = None
) -> Primed:
    """Onboard `n` hosts (due at once) and hold their first commands in the fleet.

    Afterwards every host has one command in flight and the system has caught up with
    everything it was sent, so a release of the held answers starts from a quiet system.
    """
    hosts = host_ids(n, stem=system.name)
    fleet.hold()
    producer = await start_producer(system.settings)
    started = time.time()
    limit = timeout or (n / 100.0 + 180.0)
    try:
        with ctx.ui.phase(f"{system.label}: onboarding {n:,} hosts", total=n) as phase:
            await onboard(producer, system.settings, hosts, on_sent=lambda k: phase.update(k))
        with ctx.ui.phase(f"{system.label}: first commands (held by the fleet)", total=n) as phase:
            await wait_until(
                lambda: fleet.held_count() >= n,
                timeout=limit,
                what=f"{n} first commands",
                poll=0.25,
                on_poll=lambda: phase.update(fleet.held_count()),
            )
    finally:
        await producer.stop()
    held_at = time.time()
    caught_up = await settle(ctx, system, f"{system.label}: settling", timeout=limit)
    return Primed(hosts, started, held_at, caught_up)


async def settle(ctx: Context, system: System, label: str, *, timeout: float) -> float:
    """Wait until the system has consumed (committed) all its inputs; when that began."""
    with ctx.ui.phase(label) as phase:
        async with Offsets(system.settings) as offsets:
            return await offsets.wait_caught_up(
                system.group,
                system.input_topics(),
                timeout=timeout,
                on_poll=lambda lag: phase.update(note=f"lag {lag:,}"),
            )


def due_stamp(due_for: dict[str, float]) -> Callable[[dict[str, Any], datetime], datetime]:
    """completed_at that makes a compliant host's next scan due at `due_for[host]`."""

    def stamp(command: dict[str, Any], now: datetime) -> datetime:
        return datetime.fromtimestamp(due_for[command["host_id"]], UTC) - COMPLIANT_INTERVAL

    return stamp


def steady_profile() -> FleetProfile:
    """Scans take 0.5–1.5 s; scores spread over every state; 2 % fail."""
    return FleetProfile(scan_seconds=(0.5, 1.5), scores="choice:100,95,85,60,30,10",
                        failure_rate=0.02)  # fmt: skip


def lateness(
    log: CommandLog,
    *,
    hosts_due: dict[str, float],
    measured_from: float,
    ended_at: float,
) -> dict[str, Any]:
    """Lateness of the first command for every planned host due at or after `measured_from`.

    issued_at - due_at comes from the command itself; received - due_at adds delivery to
    the agent. A planned host without a command by `ended_at` is counted as unissued and
    enters the censored distribution with `ended_at - due` (a lower bound).
    """
    first: dict[str, int] = {}
    for index, host in enumerate(log.host_ids):
        due = hosts_due.get(host)
        if due is None or host in first:
            continue
        if abs(log.due_at[index] - due) > 0.5:
            continue  # another due instance of the same host (e.g. a priming command)
        first[host] = index
    issued, received, censored = [], [], []
    unissued = 0
    excluded = 0
    for host, due in hosts_due.items():
        if due < measured_from:
            excluded += 1
            continue
        index = first.get(host)
        if index is None:
            unissued += 1
            censored.append(max(0.0, ended_at - due))
            continue
        issued.append(log.issued_at[index] - log.due_at[index])
        received.append(log.received_at[index] - log.due_at[index])
    censored_all = issued + censored
    return {
        "planned": len(hosts_due),
        "measured": len(hosts_due) - excluded,
        "excluded_due_before_system_settled": excluded,
        "issued": len(issued),
        "unissued_by_end": unissued,
        "issued_minus_due_s": distribution(issued),
        "received_minus_due_s": distribution(received),
        "with_unissued_as_lower_bound_s": distribution(censored_all) if unissued else None,
        "_issued": issued,
        "_received": received,
    }


def headline(stats: dict[str, Any], key: str = "p99") -> tuple[float | None, bool]:
    """The figure to report and whether it is only a lower bound (commands never issued)."""
    if stats.get("unissued_by_end"):
        bound = stats["with_unissued_as_lower_bound_s"]
        return bound.get(key, math.nan), True
    value = stats["issued_minus_due_s"].get(key)
    return (value if value is not None else math.nan), False


def public(stats: dict[str, Any]) -> dict[str, Any]:
    """Stats without the raw sample lists (those go to plots, not to JSON)."""
    return {k: v for k, v in stats.items() if not k.startswith("_")}


def issue_rate(log: CommandLog, since: float) -> dict[str, list[float]]:
    """Commands per second by the instant the system stamped them as issued."""
    return per_second([t for t in log.issued_at if t >= since], origin=since)


async def sleep_until(instant: float) -> None:
    delay = instant - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
