"""Simulated scanner agents: consume scan-commands, answer on scan-completed.

They stamp results with the command's own scheduler time (`issued_at`), so they stay
consistent with a worker whose clock runs faster than the wall clock.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaConsumer

from kairos.floor.settings import Settings
from schemas.results import ScanCompleted, ScanStatus
from tests.support.kafka import start_producer

Command = dict[str, Any]


def always(score: float) -> Callable[[Command], float | None]:
    return lambda command: score


class ScannerFleet:
    """Answers every command it sees, unless `answer` says otherwise.

    `score_for(command)` gives the score (None: the scan fails). Keeps the commands seen,
    the distinct ids in flight as this consumer sees them, and the largest such count.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        score_for: Callable[[Command], float | None] | None = None,
        answer: Callable[[Command], bool] = lambda command: True,
        delay_seconds: float = 0.0,
    ) -> None:
        self.settings = settings
        self.score_for = score_for or always(100)
        self.answer = answer
        self.delay_seconds = delay_seconds
        self.commands: list[Command] = []
        self.answered: set[str] = set()
        self.in_flight: set[str] = set()
        self._deadlines: dict[str, datetime] = {}
        self._newest_issued_at: datetime | None = None
        self.max_in_flight = 0
        self._consumer = AIOKafkaConsumer(
            settings.topics.scan_commands,
            **settings.kafka_client_options(),
            group_id=None,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> ScannerFleet:
        self._producer = await start_producer(self.settings)
        await self._consumer.start()
        self._tasks.append(asyncio.create_task(self._run()))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._consumer.stop()
        await self._producer.stop()

    def commands_for(self, host_id: str) -> list[Command]:
        return [command for command in self.commands if command["host_id"] == host_id]

    async def _run(self) -> None:
        async for record in self._consumer:
            command = json.loads(record.value)
            self.commands.append(command)
            command_id = command["command_id"]
            if command_id in self.answered or command_id in self.in_flight:
                continue  # A re-sent command: agents dedupe on command_id.
            issued_at = datetime.fromisoformat(command["issued_at"])
            if self._newest_issued_at is None or issued_at > self._newest_issued_at:
                self._newest_issued_at = issued_at
            self._forget_expired(issued_at=self._newest_issued_at)
            deadline = datetime.fromisoformat(command["deadline"])
            # Commands come from many partitions, so one issued before an outage may arrive
            # after others issued past its deadline: Kairos already counts it out of the cap.
            if deadline > self._newest_issued_at:
                self.in_flight.add(command_id)
                self._deadlines[command_id] = deadline
            self.max_in_flight = max(self.max_in_flight, len(self.in_flight))
            if self.answer(command):
                self.answer_later(command)

    def _forget_expired(self, *, issued_at: datetime) -> None:
        """A command past its deadline no longer holds a slot: Kairos counts it as failed.

        A command issued at `issued_at` shows Kairos' clock had reached that instant (the newest
        such instant is passed), so any unanswered command whose deadline is not later is out
        of the cap (late, not in flight).
        """
        expired = [c for c in self.in_flight if self._deadlines[c] <= issued_at]
        for command_id in expired:
            self.in_flight.discard(command_id)

    def answer_later(self, command: Command) -> None:
        """Answer `command` now, although `answer` declined it when it arrived."""
        self._tasks.append(asyncio.create_task(self._reply(command)))

    async def _reply(self, command: Command) -> None:
        if self.delay_seconds:
            await asyncio.sleep(self.delay_seconds)
        score = self.score_for(command)
        finished = datetime.fromisoformat(command["issued_at"])
        result = ScanCompleted(
            event_id=uuid.uuid4(),
            command_id=command["command_id"],
            host_id=command["host_id"],
            status=ScanStatus.FAILED if score is None else ScanStatus.SUCCEEDED,
            started_at=finished,
            completed_at=finished,
            score=score,
            passed=10,
            failed=0 if score == 100 else 3,
            scan_id=f"scan-{command['command_id'][:8]}",
            error="simulated failure" if score is None else None,
        )
        # Leave the in-flight set before the result is sent: the slot can only be
        # re-used after Kairos has read the result.
        self.in_flight.discard(command["command_id"])
        self.answered.add(command["command_id"])
        await self._producer.send(
            self.settings.topics.scan_completed,
            result.model_dump_json().encode(),
            key=command["host_id"].encode(),
        )

    async def flush(self) -> None:
        await self._producer.flush()
