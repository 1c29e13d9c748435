"""Generic schedules through a real broker: backfills that never stop their schedule, run
outcomes that follow the commands, end reports counted once, and every occurrence traced.

Workers run a ScaledClock at a minute per second: "*/2 * * * *" fires every two seconds.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from kairos.floor.clock import ScaledClock
from kairos.floor.settings import Settings
from schemas.base import HostStatus
from schemas.internal import ReleaseOutcome, ScheduleCommandEnded
from streams import codec
from tests.support.factories import (
    backfill_requested,
    scan_requested,
    scan_result,
    schedule_triggered,
)
from tests.support.kafka import publish, wait_until
from tests.support.schedules import schedule_harness

pytestmark = pytest.mark.integration

MINUTE_PER_SECOND = 60.0
EVERY_TWO_MINUTES = {"kind": "cron", "expression": "*/2 * * * *"}
ODD_MINUTES = {"kind": "cron", "expression": "1-59/2 * * * *"}
ON_DEMAND = {"kind": "none"}
LONG_SCAN_TIMEOUT = 3600


def scaled(make_settings, speed: float) -> tuple[Settings, ScaledClock]:
    origin = datetime.now(UTC)
    settings = make_settings(clock_speed=speed, clock_origin=origin, clock_start=origin)
    return settings, ScaledClock(speed, origin, origin)


async def test_a_backfill_over_runs_that_already_ran_never_stops_the_schedule(
    make_settings, workers
) -> None:
    settings, clock = scaled(make_settings, MINUTE_PER_SECOND)
    workers(settings)
    async with schedule_harness(settings) as bench:
        await bench.configure(scan_timeout_seconds=LONG_SCAN_TIMEOUT)
        await bench.add_hosts("bf-1")
        only = {"object_ids": ["bf-1"]}
        await bench.upsert("even", recurrence=EVERY_TWO_MINUTES, targets=only)
        # The same host and scanner on the odd minutes: a busy marker left behind by the
        # backfill would skip it forever.
        await bench.upsert("odd", recurrence=ODD_MINUTES, targets=only)
        await wait_until(
            lambda: len(bench.log.occurrences("even")) >= 2,
            timeout=30,
            what="two regular runs of the schedule",
        )
        ran = bench.log.occurrences("even")
        requested_at = clock.now()
        request = backfill_requested("even", ran[0] - timedelta(seconds=1), requested_at)
        await bench.send_change(request)

        def after_backfill(schedule_id: str) -> list[datetime]:
            return [
                run.occurrence
                for run in bench.log.runs(schedule_id)
                if run.occurrence > requested_at and run.commands_issued == 1
            ]

        await wait_until(
            lambda: len(after_backfill("even")) >= 3 and len(after_backfill("odd")) >= 3,
            timeout=40,
            what="both schedules to go on running after the backfill",
        )

    # Backfilled occurrences that had run before ran again, each with a command of its own.
    # A run may find bf-1 busy with "odd"'s command (the same scanner): it is skipped as
    # busy, as one command per host and scanner says, and counted as such.
    fired: dict[datetime, int] = {}
    for run in bench.log.runs("even"):
        if run.occurrence < requested_at:
            if run.commands_issued == 0:
                assert (run.outcome, run.skip_reason) == ("skipped", "all_busy"), run
                continue
            assert run.commands_issued == 1, run
            fired[run.occurrence] = fired.get(run.occurrence, 0) + 1
    rerun = [occurrence for occurrence in ran if fired.get(occurrence, 0) >= 2]
    assert rerun, f"no occurrence that ran was backfilled: {fired}"
    ended: dict[datetime, int] = {}
    for run in bench.log.outcomes("even", "succeeded"):
        ended[run.occurrence] = ended.get(run.occurrence, 0) + 1
    assert all(ended.get(occurrence, 0) >= 2 for occurrence in rerun), ended
    ids = {command["command_id"] for command in bench.commands("even")}
    assert len(ids) >= len(fired) + len(rerun) + 2
    final = bench.log.state("even")
    assert final is not None and final.failed_runs == 0 and final.enabled


async def test_one_failing_host_makes_a_partially_failed_run_not_a_failed_schedule(
    make_settings, workers
) -> None:
    settings, _ = scaled(make_settings, MINUTE_PER_SECOND)
    workers(settings)
    fleet_hosts = [f"pf-{n}" for n in range(4)]

    def score(command: dict) -> float | None:
        return None if command["host_id"] == "pf-0" else 100.0

    async with schedule_harness(settings, score_for=score) as bench:
        await bench.configure(scan_timeout_seconds=LONG_SCAN_TIMEOUT)
        await bench.add_hosts(*fleet_hosts)
        await bench.upsert(
            "fleet", recurrence=EVERY_TWO_MINUTES, targets={"object_ids": fleet_hosts},
            max_retries=0,
        )  # fmt: skip
        await wait_until(
            lambda: len(bench.log.outcomes("fleet", "partially_failed")) >= 2,
            timeout=40,
            what="two partially failed runs",
        )

    state = bench.log.state("fleet")
    assert state is not None and state.enabled, state
    assert state.failed_runs == 0 and state.consecutive_failures == 0
    assert state.partially_failed_runs >= 2 and state.retry is None
    ended = bench.log.outcomes("fleet", "partially_failed")
    assert all((r.commands_succeeded, r.commands_failed) == (3, 1) for r in ended), ended
    assert not bench.log.outcomes("fleet", "failed")


async def test_an_end_report_sent_again_is_counted_once(make_settings, workers) -> None:
    settings = make_settings()
    workers(settings)
    hosts = ["twice-1", "twice-2"]
    async with schedule_harness(settings, answer=lambda command: False) as bench:
        await bench.add_hosts(*hosts)
        await bench.upsert("twice", recurrence=ON_DEMAND, targets={"object_ids": hosts})
        await bench.wait_for_schedules("twice")
        await bench.send_change(schedule_triggered("twice"))
        await wait_until(
            lambda: len(bench.commands("twice")) == 2, timeout=30, what="both commands out"
        )
        first, second = bench.commands("twice")

        def pending() -> int | None:
            state = bench.log.state("twice")
            if state is None or not state.in_flight or not state.in_flight[0].dispatched:
                return None
            return state.in_flight[0].pending_commands

        await wait_until(lambda: pending() == 2, timeout=30, what="the run dispatched")
        producer = bench.producer
        await producer.send_and_wait(
            settings.topics.scan_completed,
            codec.encode(scan_result(first)),
            key=first["host_id"].encode(),
        )
        await wait_until(lambda: pending() == 1, timeout=30, what="one command counted")
        # What a worker killed after its report, before its offset commit, sends again.
        report = ScheduleCommandEnded(
            schedule_id="twice",
            occurrence=datetime.fromisoformat(first["due_at"]),
            attempt=1,
            command_id=first["command_id"],
            host_id=first["host_id"],
            outcome=ReleaseOutcome.COMPLETED,
        )
        state = bench.log.state("twice")
        assert state is not None
        report = report.model_copy(update={"occurrence": state.in_flight[0].occurrence})
        await publish(producer, settings.topics.host_signals, "twice", report)
        await asyncio.sleep(3.0)
        assert pending() == 1, "the repeated end report ended the run early"
        await producer.send_and_wait(
            settings.topics.scan_completed,
            codec.encode(scan_result(second)),
            key=second["host_id"].encode(),
        )
        await wait_until(
            lambda: bool(bench.log.outcomes("twice", "succeeded")),
            timeout=30,
            what="the run to end on its second command",
        )
    (ended,) = bench.log.outcomes("twice", "succeeded")
    assert (ended.commands_succeeded, ended.commands_failed) == (2, 0)


async def test_every_occurrence_leaves_a_trace(make_settings, workers) -> None:
    settings, _ = scaled(make_settings, MINUTE_PER_SECOND)
    workers(settings)
    # Nothing answers: the first run stays in flight and the next occurrences overlap it.
    async with schedule_harness(settings, answer=lambda command: False) as bench:
        await bench.configure(scan_timeout_seconds=LONG_SCAN_TIMEOUT)
        await bench.add_hosts("stuck-1")
        await bench.add_hosts("down-1", status=HostStatus.DOWN)
        await bench.upsert(
            "stuck", recurrence=EVERY_TWO_MINUTES, targets={"object_ids": ["stuck-1"]}
        )
        await bench.upsert(
            "nobody", recurrence=EVERY_TWO_MINUTES,
            targets={"filter": {"field": "labels.env", "op": "eq", "value": "absent"}},
        )  # fmt: skip
        await bench.upsert(
            "all-down", recurrence=EVERY_TWO_MINUTES, targets={"object_ids": ["down-1"]}
        )

        def overlapped() -> int:
            state = bench.log.state("stuck")
            return state.dropped_occurrences.get("overlap", 0) if state else 0

        await wait_until(
            lambda: (
                overlapped() >= 2
                and bool(bench.log.runs("nobody"))
                and bool(bench.log.runs("all-down"))
            ),
            timeout=40,
            what="overlapped occurrences and skipped runs",
        )
        await asyncio.sleep(1.0)

    dropped = bench.log.outcomes("stuck", "dropped")
    assert len([r for r in dropped if r.skip_reason == "overlap"]) >= 2
    assert {r.skip_reason for r in bench.log.runs("nobody")} == {"no_host_matched"}
    skipped = bench.log.runs("all-down")
    assert {r.skip_reason for r in skipped} == {"all_down"}
    assert all(r.skipped_hosts == {"down": 1} for r in skipped)


async def test_a_schedule_of_the_adaptive_scanner_skips_a_host_busy_with_its_adaptive_scan(
    make_settings, workers
) -> None:
    settings = make_settings()
    workers(settings)
    # Agents leave the adaptive scanner's commands unanswered: the host's own scan stays in
    # flight.
    silent = "compliance"
    async with schedule_harness(settings, answer=lambda c: c["scanner"] != silent) as bench:
        await bench.configure(initial_spread_seconds=0, scan_timeout_seconds=LONG_SCAN_TIMEOUT)
        await bench.add_hosts("shared-1")

        def adaptive_in_flight() -> bool:
            return any(
                c["host_id"] == "shared-1" and c.get("schedule_id") is None
                for c in bench.fleet.commands
            )

        await wait_until(adaptive_in_flight, timeout=30, what="the host's adaptive scan")
        await bench.upsert(
            "extra", scanner=silent, recurrence=ON_DEMAND, targets={"object_ids": ["shared-1"]}
        )
        await bench.wait_for_schedules("extra")
        await bench.send_change(schedule_triggered("extra"))
        await wait_until(
            lambda: bool(bench.log.runs("extra")), timeout=30, what="the triggered run"
        )
    (run,) = bench.log.runs("extra")
    assert (run.outcome, run.commands_issued, run.skip_reason) == ("skipped", 0, "all_busy")
    assert run.skipped_hosts == {"busy": 1}
    assert bench.commands("extra") == []


async def test_the_adaptive_scan_waits_for_a_schedule_command_of_its_scanner_then_runs(
    make_settings, workers
) -> None:
    settings = make_settings()
    workers(settings)
    host = "shared-2"
    # Adaptive commands are answered at once; the schedule's command waits for the test.
    async with schedule_harness(settings, answer=lambda c: c.get("schedule_id") is None) as bench:
        await bench.configure(initial_spread_seconds=0, scan_timeout_seconds=LONG_SCAN_TIMEOUT)
        await bench.add_hosts(host)

        def adaptive() -> list[dict[str, object]]:
            return [c for c in bench.fleet.commands_for(host) if c.get("schedule_id") is None]

        await wait_until(
            lambda: any(c["command_id"] in bench.fleet.answered for c in adaptive()),
            timeout=30,
            what="the host's first adaptive scan, answered",
        )
        await bench.upsert(
            "audit", scanner="compliance", recurrence=ON_DEMAND, targets={"object_ids": [host]}
        )
        await bench.wait_for_schedules("audit")
        await bench.send_change(schedule_triggered("audit"))
        await wait_until(lambda: bool(bench.commands("audit")), timeout=30, what="audit's command")
        before = len(adaptive())

        # An operator forces the adaptive scan while the schedule's scan of the same scanner
        # runs: without the hold it would be issued within a second.
        await publish(bench.producer, settings.topics.schedule_changes, host, scan_requested(host))
        await asyncio.sleep(6)
        assert len(adaptive()) == before, "an adaptive command went out beside the schedule's"

        [audit] = bench.commands("audit")
        bench.fleet.answer_later(audit)
        await wait_until(
            lambda: len(adaptive()) > before, timeout=60, what="the forced scan after audit's"
        )
    forced = adaptive()[before]
    assert forced["reason"] == "force"
    assert forced["command_id"] != audit["command_id"]
