"""A simulated fleet of scanner agents on the SDK: scores from a distribution, a failure
rate, a scan duration. `kairos agent simulate` runs one; the dev stack can call
`simulated_fleet(settings, FleetSpec(...))` to run one inside its own event loop.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

from kairos.agent.sdk import Agent, Handler
from kairos.floor.clock import Clock
from kairos.floor.settings import Settings
from schemas.agent import ScanReport
from schemas.commands import ADAPTIVE_SCANNER, ScanCommand
from schemas.results import ScanStatus

CHECKS_PER_SCAN = 50


@dataclass(frozen=True)
class ScannerProfile:
    """How one simulated scanner behaves.

    Scores are drawn from a normal distribution (`score_mean`, `score_stddev`) clipped to
    0..100; `failure_rate` of the scans fail; a scan takes `scan_seconds` of wall time, give
    or take `scan_jitter` of it.
    """

    score_mean: float = 75.0
    score_stddev: float = 20.0
    failure_rate: float = 0.05
    scan_seconds: float = 0.5
    scan_jitter: float = 0.5

    def __post_init__(self) -> None:
        if not 0 <= self.failure_rate <= 1:
            raise ValueError("failure_rate must be between 0 and 1")
        if self.scan_seconds < 0 or not 0 <= self.scan_jitter <= 1:
            raise ValueError("scan_seconds must be >= 0 and scan_jitter between 0 and 1")


@dataclass(frozen=True)
class FleetSpec:
    """Which scanners to simulate, how many agents each, and how they behave."""

    scanners: tuple[str, ...] = (ADAPTIVE_SCANNER,)
    agents_per_scanner: int = 1
    concurrency: int = 10
    profile: ScannerProfile = field(default_factory=ScannerProfile)
    seed: int | None = None


def simulated_scanner(profile: ScannerProfile, rng: random.Random) -> Handler:
    """A handler that sleeps a scan's duration and reports a drawn score or a failure."""

    async def scan(command: ScanCommand) -> ScanReport:
        jitter = profile.scan_jitter * profile.scan_seconds
        await asyncio.sleep(max(0.0, profile.scan_seconds + rng.uniform(-jitter, jitter)))
        if rng.random() < profile.failure_rate:
            return ScanReport(status=ScanStatus.FAILED, error="simulated scan failure")
        score = round(min(100.0, max(0.0, rng.gauss(profile.score_mean, profile.score_stddev))), 1)
        failed = round(CHECKS_PER_SCAN * (100 - score) / 100)
        return ScanReport(
            status=ScanStatus.SUCCEEDED,
            score=score,
            passed=CHECKS_PER_SCAN - failed,
            failed=failed,
            # High-severity failures make a host critical whatever its score: only the
            # worst scans have them, so the simulated fleet spreads over every state.
            severity_high_failed=failed // 3 if score < 20 else 0,
            scan_id=f"sim-{command.command_id[:12]}",
        )

    return scan


@asynccontextmanager
async def simulated_fleet(
    settings: Settings, spec: FleetSpec, *, clock: Clock | None = None
) -> AsyncIterator[list[Agent]]:
    """Runs the fleet while the block runs; stops every agent gracefully on leaving it."""
    rng = random.Random(spec.seed)
    async with AsyncExitStack() as stack:
        agents = []
        for scanner in spec.scanners:
            for _ in range(spec.agents_per_scanner):
                agent = Agent(
                    settings,
                    simulated_scanner(spec.profile, random.Random(rng.random())),
                    scanner=scanner,
                    concurrency=spec.concurrency,
                    clock=clock,
                )
                agents.append(await stack.enter_async_context(agent))
        yield agents


async def run_fleet(
    settings: Settings, spec: FleetSpec, stop: asyncio.Event, *, clock: Clock | None = None
) -> list[Agent]:
    """Runs the fleet until `stop` is set; returns the agents (their `stats` say what they
    did)."""
    async with simulated_fleet(settings, spec, clock=clock) as agents:
        await stop.wait()
    return agents
