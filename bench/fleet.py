"""A simulated scanner fleet: consumes scan-commands, answers on scan-completed.

Each command is answered once (agents dedupe on command_id) after a configurable scan
duration, with a score drawn from a configurable distribution, or a failure at a
configurable rate. Replies go out in batches through one lingering producer. The fleet
also keeps the CommandLog of what it saw, so a scenario needs only one consumer.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bench.kafka_io import CommandCollector, start_producer
from kairos.floor.settings import Settings
from schemas.results import ScanCompleted

Command = dict[str, Any]


def parse_scores(spec: str) -> Callable[[random.Random], float]:
    """`100` | `uniform:LOW:HIGH` | `choice:A,B,C` -> a score sampler."""
    kind, _, rest = spec.partition(":")
    if not rest:
        value = float(kind)
        return lambda rng: value
    if kind == "uniform":
        low, high = (float(part) for part in rest.split(":"))
        return lambda rng: round(rng.uniform(low, high), 1)
    if kind == "choice":
        options = [float(part) for part in rest.split(",")]
        return lambda rng: rng.choice(options)
    raise ValueError(f"unknown score distribution {spec!r}")


@dataclass(frozen=True)
class FleetProfile:
    """How the simulated scanners behave."""

    scan_seconds: tuple[float, float] = (0.5, 0.5)
    scores: str = "100"
    failure_rate: float = 0.0
    seed: int = 7

    def describe(self) -> dict[str, Any]:
        return {
            "scan_seconds": list(self.scan_seconds),
            "scores": self.scores,
            "failure_rate": self.failure_rate,
        }


class ScannerFleet(CommandCollector):
    """Answers every new command after its scan duration, unless held.

    `completed_at(command, now)` stamps the result (default: the wall clock), which lets a
    scenario place each host's next due time exactly. `hold()` keeps answers back until
    `release()`, so a scenario can build up commands in flight and let them go at once.
    """

    def __init__(
        self,
        settings: Settings,
        profile: FleetProfile | None = None,
        *,
        completed_at: Callable[[Command, datetime], datetime] | None = None,
        topic: str | None = None,
        results_topic: str | None = None,
    ) -> None:
        self.profile = profile or FleetProfile()
        self.settings = settings
        self._score = parse_scores(self.profile.scores)
        self._rng = random.Random(self.profile.seed)
        self._completed_at = completed_at or (lambda command, now: now)
        self._results_topic = results_topic or settings.topics.scan_completed
        self._answered: set[str] = set()
        self._due: list[tuple[float, int, Command, Any, Any]] = []
        self._held: list[Command] = []
        self._holding = False
        self._sequence = 0
        self.sent = 0
        self.duplicates = 0
        self._reply_task: asyncio.Task[None] | None = None
        self._checked_contract = False
        super().__init__(settings, topic or settings.topics.scan_commands, self._on_new_command)

    async def __aenter__(self) -> ScannerFleet:
        self._producer = await start_producer(self.settings)
        await super().__aenter__()
        self._reply_task = asyncio.create_task(self._reply_loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await super().__aexit__(*exc)
        if self._reply_task is not None:
            self._reply_task.cancel()
            try:
                await self._reply_task
            except asyncio.CancelledError:
                pass
        await self._producer.flush()
        await self._producer.stop()

    def hold(self) -> None:
        self._holding = True

    def held_count(self) -> int:
        return len(self._held)

    def release(
        self,
        stamp: Callable[[Command, datetime], datetime] | None = None,
        *,
        score: float | None = None,
        scan_seconds: float | None = None,
    ) -> int:
        """Answer every held command; `stamp`/`score` override the profile for these answers.

        Returns how many were released. Their scan durations start now.
        """
        self._holding = False
        held, self._held = self._held, []
        for command in held:
            self._schedule(command, stamp, score, scan_seconds)
        return len(held)

    def set_completed_at(self, stamp: Callable[[Command, datetime], datetime]) -> None:
        self._completed_at = stamp

    def _on_new_command(self, command: Command) -> None:
        command_id = command["command_id"]
        if command_id in self._answered:
            self.duplicates += 1
            return
        self._answered.add(command_id)
        if self._holding:
            self._held.append(command)
        else:
            self._schedule(command)

    def _schedule(
        self,
        command: Command,
        stamp: Callable[[Command, datetime], datetime] | None = None,
        score: float | None = None,
        scan_seconds: float | None = None,
    ) -> None:
        low, high = self.profile.scan_seconds
        if scan_seconds is not None:
            duration = scan_seconds
        else:
            duration = low if high <= low else self._rng.uniform(low, high)
        self._sequence += 1
        entry = (time.monotonic() + duration, self._sequence, command, stamp, score)
        heapq.heappush(self._due, entry)

    async def _reply_loop(self) -> None:
        while True:
            now = time.monotonic()
            batch = []
            while self._due and self._due[0][0] <= now:
                batch.append(heapq.heappop(self._due))
            for _, _, command, stamp, score in batch:
                await self._producer.send(
                    self._results_topic,
                    self._result(command, stamp, score),
                    key=command["host_id"].encode(),
                )
                self.sent += 1
            await asyncio.sleep(0.01)

    def _result(
        self,
        command: Command,
        stamp: Callable[[Command, datetime], datetime] | None = None,
        forced_score: float | None = None,
    ) -> bytes:
        now = datetime.now(UTC)
        finished = (stamp or self._completed_at)(command, now)
        if forced_score is not None:
            failed, score = False, forced_score
        else:
            failed = self._rng.random() < self.profile.failure_rate
            score = None if failed else self._score(self._rng)
        value: dict[str, Any] = {
            "event_id": str(uuid.uuid4()),
            "schema_version": 1,
            "command_id": command["command_id"],
            "host_id": command["host_id"],
            "scanner": command.get("scanner", "compliance"),
            "status": "failed" if failed else "succeeded",
            "started_at": finished.isoformat(),
            "completed_at": finished.isoformat(),
            "score": score,
            "passed": 10,
            "failed": 0 if score == 100 else 3,
            "scan_id": f"bench-{command['command_id'][:8]}",
            "error": "simulated failure" if failed else None,
        }
        raw = json.dumps(value).encode()
        if not self._checked_contract:
            ScanCompleted.model_validate_json(raw)  # the shortcut must still honour the contract
            self._checked_contract = True
        return raw

    async def flush(self) -> None:
        await self._producer.flush()
