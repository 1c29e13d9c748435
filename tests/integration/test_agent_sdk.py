"""The scanner-agent SDK (`kairos.agent.Agent`) against a real broker, and against a real
`kairos worker` whose scheduler clock runs 240x faster than wall time (a 600 s scan timeout
is 2.5 s, a 300 s retry delay 1.25 s, a 15-minute interval 3.75 s).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kairos.agent import (
    Agent,
    FleetSpec,
    ScanCommand,
    ScannerProfile,
    ScanReport,
    ScanStatus,
    simulated_fleet,
)
from kairos.floor.clock import FrozenClock
from kairos.floor.settings import Settings
from schemas.agent import result_event_id
from schemas.base import CommandReason, ComplianceState
from schemas.topics import CONFIG_KEY
from streams.admin import ensure_topics
from tests.support.factories import config_updated, host_created
from tests.support.kafka import Collector, publish, start_producer, wait_until
from tests.support.stack import kairos_executable, settings_env

pytestmark = pytest.mark.integration

SPEED = 240.0


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.fixture
def fast_settings(make_settings) -> Settings:
    return make_settings(clock_speed=SPEED, clock_origin=datetime.now(UTC))


def commands_for(collector: Collector, settings: Settings, host_id: str) -> list[dict[str, Any]]:
    return [c for c in collector.values(settings.topics.scan_commands) if c["host_id"] == host_id]


def results_for(collector: Collector, settings: Settings, host_id: str) -> list[dict[str, Any]]:
    return [r for r in collector.values(settings.topics.scan_completed) if r["host_id"] == host_id]


async def test_agent_answers_a_real_worker_which_schedules_the_next_scan(
    fast_settings: Settings, workers
) -> None:
    settings = fast_settings
    workers(settings)
    producer = await start_producer(settings)

    async def scan(command: ScanCommand) -> ScanReport:
        return ScanReport(status=ScanStatus.SUCCEEDED, score=10, passed=5, failed=45)

    names = settings.topics
    async with (
        Collector(settings, names.scan_commands, names.scan_completed) as seen,
        Agent(settings, scan) as agent,
    ):
        await publish(
            producer, names.schedule_changes, CONFIG_KEY, config_updated(interval_critical=15)
        )
        await publish(producer, names.object_created, "sdk-1", host_created("sdk-1"))
        await seen.wait_for(
            lambda: len(commands_for(seen, settings, "sdk-1")) >= 2,
            timeout=30,
            what="the command after the first result",
        )
    await producer.stop()
    first, second = commands_for(seen, settings, "sdk-1")[:2]
    result = next(
        r for r in results_for(seen, settings, "sdk-1") if r["command_id"] == first["command_id"]
    )
    assert result["status"] == "succeeded" and result["score"] == 10
    assert result["scanner"] == "compliance"
    assert result["event_id"] == str(result_event_id(first["command_id"]))
    # The worker applied the result: the next scan is one critical interval after it.
    assert second["reason"] == "scheduled" and second["state"] == "critical"
    assert at(second["due_at"]) == at(result["completed_at"]) + timedelta(minutes=15)
    assert agent.stats.succeeded >= 1 and agent.stats.failed == 0


async def test_a_handler_that_raises_is_reported_failed_and_the_worker_retries(
    fast_settings: Settings, workers
) -> None:
    settings = fast_settings
    workers(settings)
    producer = await start_producer(settings)

    async def scan(command: ScanCommand) -> ScanReport:
        raise RuntimeError("nmap exploded")

    names = settings.topics
    async with (
        Collector(settings, names.scan_commands, names.scan_completed) as seen,
        Agent(settings, scan) as agent,
    ):
        await publish(producer, names.object_created, "sdk-2", host_created("sdk-2"))
        await seen.wait_for(
            lambda: len(commands_for(seen, settings, "sdk-2")) >= 2, timeout=30, what="a retry"
        )
    await producer.stop()
    first, retry = commands_for(seen, settings, "sdk-2")[:2]
    result = next(
        r for r in results_for(seen, settings, "sdk-2") if r["command_id"] == first["command_id"]
    )
    assert result["status"] == "failed" and result["error"] == "RuntimeError: nmap exploded"
    assert retry["reason"] == "retry" and retry["attempt"] == 2
    assert agent.stats.failed >= 1 and agent.stats.succeeded == 0


async def test_a_handler_still_running_at_the_deadline_is_reported_timed_out(
    fast_settings: Settings, workers
) -> None:
    settings = fast_settings
    workers(settings)
    producer = await start_producer(settings)
    started: list[str] = []

    async def scan(command: ScanCommand) -> ScanReport:
        started.append(command.command_id)
        await asyncio.Event().wait()  # Never finishes.
        raise AssertionError("unreachable")

    names = settings.topics
    async with (
        Collector(settings, names.scan_commands, names.scan_completed) as seen,
        Agent(settings, scan) as agent,
    ):
        await publish(producer, names.object_created, "sdk-3", host_created("sdk-3"))
        await seen.wait_for(
            lambda: len(results_for(seen, settings, "sdk-3")) >= 1, timeout=30, what="a result"
        )
    await producer.stop()
    command = commands_for(seen, settings, "sdk-3")[0]
    result = results_for(seen, settings, "sdk-3")[0]
    assert started[0] == result["command_id"] == command["command_id"]
    assert result["status"] == "failed"
    assert result["error"].startswith("timed out at the command's deadline")
    # Given up at the deadline (scheduler time), not before; a 600 s timeout is 2.5 s here.
    assert at(result["completed_at"]) >= at(command["deadline"])
    assert at(result["completed_at"]) - at(command["deadline"]) < timedelta(minutes=10)
    assert agent.stats.timed_out >= 1


# --- the SDK's own guarantees, with commands published by hand ----------------------------

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def command(command_id: str, *, scanner: str = "nmap", host_id: str | None = None) -> ScanCommand:
    return ScanCommand(
        event_id=uuid.uuid4(),
        command_id=command_id,
        host_id=host_id or f"host-{command_id}",
        scanner=scanner,
        priority=5,
        reason=CommandReason.SCHEDULE,
        state=ComplianceState.UNKNOWN,
        due_at=T0,
        issued_at=T0,
        deadline=T0 + timedelta(hours=1),
        attempt=1,
    )


async def test_concurrency_limit_and_graceful_shutdown_hand_the_rest_to_the_group(
    make_settings,
) -> None:
    settings = make_settings()
    await ensure_topics(settings)
    clock = FrozenClock(T0 + timedelta(minutes=1))
    producer = await start_producer(settings)
    names = settings.topics
    ids = [f"c{n}" for n in range(6)]
    for command_id in ids:
        await publish(producer, names.scan_commands, f"host-{command_id}", command(command_id))
    release = asyncio.Event()
    begun: list[str] = []

    async def held(command: ScanCommand) -> ScanReport:
        begun.append(command.command_id)
        await release.wait()
        return ScanReport(status=ScanStatus.SUCCEEDED, score=99)

    async with Collector(settings, names.scan_completed) as results:
        first = Agent(
            settings, held, scanner="nmap", concurrency=2, clock=clock, shutdown_grace_seconds=0.5
        )
        await first.start()
        await wait_until(lambda: len(begun) == 2, timeout=30, what="two scans started")
        await asyncio.sleep(1.0)  # Time to (wrongly) start a third one.
        assert len(begun) == 2 and first.stats.max_in_flight == 2
        await first.stop()  # Both in flight are cut short and reported failed.
        await results.wait_for(
            lambda: len(results.values(names.scan_completed)) == 2, timeout=10, what="2 results"
        )
        cut = results.values(names.scan_completed)
        assert {r["command_id"] for r in cut} == set(begun)
        assert {r["status"] for r in cut} == {"failed"}
        assert {r["error"] for r in cut} == {"the agent shut down before the scan finished"}

        release.set()  # The next member of the group gets what the first did not answer.
        async with Agent(settings, held, scanner="nmap", concurrency=2, clock=clock) as second:
            await results.wait_for(
                lambda: len(results.values(names.scan_completed)) == 6, timeout=30, what="6"
            )
            await asyncio.sleep(1.0)  # Time for a wrong extra answer to show.
    await producer.stop()
    answered = [r["command_id"] for r in results.values(names.scan_completed)]
    assert sorted(answered) == ids  # Each once: none lost at the shutdown, none run twice.
    assert second.stats.succeeded == 4 and second.stats.max_in_flight <= 2


async def test_duplicates_other_scanners_and_expired_commands_are_not_run(make_settings) -> None:
    settings = make_settings()
    await ensure_topics(settings)
    clock = FrozenClock(T0 + timedelta(minutes=1))
    producer = await start_producer(settings)
    names = settings.topics
    await publish(producer, names.scan_commands, "host-a", command("a", host_id="host-a"))
    await publish(producer, names.scan_commands, "host-a", command("a", host_id="host-a"))
    await publish(producer, names.scan_commands, "host-b", command("b", scanner="compliance"))
    late = command("late").model_copy(update={"deadline": T0})
    await publish(producer, names.scan_commands, "host-late", late)
    await publish(producer, names.scan_commands, "host-z", command("z", host_id="host-z"))
    ran: list[str] = []

    async def scan(command: ScanCommand) -> ScanReport:
        ran.append(command.command_id)
        return ScanReport(status=ScanStatus.SUCCEEDED, score=50)

    async with (
        Collector(settings, names.scan_completed) as results,
        Agent(settings, scan, scanner="nmap", clock=clock) as agent,
    ):
        await wait_until(lambda: len(ran) == 2, timeout=30, what="two scans")
        await results.wait_for(
            lambda: len(results.values(names.scan_completed)) == 2, timeout=10, what="2 results"
        )
        await asyncio.sleep(1.0)  # Time for a wrong extra answer to show.
    await producer.stop()
    assert sorted(ran) == ["a", "z"]
    assert sorted(r["command_id"] for r in results.values(names.scan_completed)) == ["a", "z"]
    assert (agent.stats.duplicates, agent.stats.expired) == (1, 1)


async def test_simulated_fleet_draws_scores_and_failures_from_its_profile(make_settings) -> None:
    settings = make_settings()
    await ensure_topics(settings)
    clock = FrozenClock(T0 + timedelta(minutes=1))
    producer = await start_producer(settings)
    names = settings.topics
    ids = [f"s{n}" for n in range(40)]
    for command_id in ids:
        await publish(producer, names.scan_commands, f"host-{command_id}", command(command_id))
    spec = FleetSpec(
        scanners=("nmap",),
        agents_per_scanner=2,
        profile=ScannerProfile(score_mean=60, score_stddev=10, failure_rate=0.3, scan_seconds=0.01),
        seed=3,
    )
    async with (
        Collector(settings, names.scan_completed) as results,
        simulated_fleet(settings, spec, clock=clock) as fleet,
    ):
        await results.wait_for(
            lambda: len(results.values(names.scan_completed)) >= 40, timeout=30, what="40"
        )
    await producer.stop()
    # Two agents share the partitions; a rebalance while they join may hand a command to
    # the second before the first committed it (at-least-once): count each command once.
    answers = list({r["command_id"]: r for r in results.values(names.scan_completed)}.values())
    assert {r["command_id"] for r in answers} == set(ids) and len(fleet) == 2
    failed = [r for r in answers if r["status"] == "failed"]
    scores = [r["score"] for r in answers if r["status"] == "succeeded"]
    assert 3 <= len(failed) <= 25  # 30 % of 40, with room for chance.
    assert all(r["error"] == "simulated scan failure" for r in failed)
    assert 40 <= sum(scores) / len(scores) <= 80 and all(0 <= s <= 100 for s in scores)


async def test_kairos_agent_simulate_answers_commands_and_stops_on_sigterm(
    make_settings, broker_kind: str
) -> None:
    if broker_kind == "tansu":
        pytest.skip(
            "tansu admits a new consumer group slowly: an agent process started and stopped"
            " within the test's bounds does not get its partitions in time (Apache Kafka proves it)"
        )
    settings = make_settings()
    await ensure_topics(settings)
    producer = await start_producer(settings)
    names = settings.topics
    now = datetime.now(UTC)
    fresh = command("cli-1").model_copy(update={"deadline": now + timedelta(hours=1)})
    await publish(producer, names.scan_commands, "host-cli-1", fresh)
    log_path = Path(tempfile.mkdtemp()) / "simulate.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [*kairos_executable(), "agent", "simulate", "--scanner", "nmap", "--scan-seconds", "0"],
            env=settings_env(settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        async with Collector(settings, names.scan_completed) as results:
            await results.wait_for(
                lambda: len(results.values(names.scan_completed)) == 1, timeout=60, what="answer"
            )
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        code = process.wait(20)
    await producer.stop()
    assert results.values(names.scan_completed)[0]["command_id"] == "cli-1"
    assert code == 0, log_path.read_text()[-3000:]
    assert "agents stopped" in log_path.read_text()


async def test_run_until_signalled_answers_then_stops_on_sigterm(
    make_settings, broker_kind: str
) -> None:
    if broker_kind == "tansu":
        pytest.skip(
            "tansu admits a new consumer group slowly: an agent process started and stopped"
            " within the test's bounds does not get its partitions in time (Apache Kafka proves it)"
        )
    settings = make_settings()
    await ensure_topics(settings)
    producer = await start_producer(settings)
    names = settings.topics
    await publish(producer, names.scan_commands, "host-sig", command("sig"))

    async def scan(command: ScanCommand) -> ScanReport:
        return ScanReport(status=ScanStatus.SUCCEEDED, score=100)

    agent = Agent(settings, scan, scanner="nmap", clock=FrozenClock(T0))
    async with Collector(settings, names.scan_completed) as results:
        running = asyncio.create_task(agent.run_until_signalled())
        await results.wait_for(
            lambda: len(results.values(names.scan_completed)) == 1, timeout=30, what="answer"
        )
        os.kill(os.getpid(), signal.SIGTERM)  # Caught by the agent's handler while it runs.
        await asyncio.wait_for(running, 15)
    await producer.stop()
    assert agent.error is None and agent.stats.succeeded == 1
