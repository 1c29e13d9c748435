"""Generic schedules on the real broker, where timing is the point: DST days, catch-up after
an outage, overlap, grace periods, update/delete triggers, retries and self-disable, backfill
and pause/resume.

Workers run a ScaledClock; the test rebuilds the same clock to know what instant it is, and
every expectation is an instant: a command's due_at, a run's occurrence, a state's fields.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kairos.floor.clock import ScaledClock
from kairos.floor.settings import Settings
from schemas.schedules import ScheduleDisabled, ScheduleStatus, ScheduleTriggered
from streams.policy.schedules import MISFIRE_TOLERANCE, schedule_status
from streams.policy.targets import occurrence_command_id
from tests.support.factories import (
    backfill_requested,
    host_created,
    host_deleted,
    host_updated,
    schedule_paused,
    schedule_resumed,
    schedule_triggered,
)
from tests.support.kafka import wait_until
from tests.support.schedules import (
    ScheduleHarness,
    due_at,
    grid_before,
    grid_between,
    schedule_harness,
    sleep_until,
    suspended,
)

pytestmark = pytest.mark.integration

HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)
LONGEST_SCAN_TIMEOUT = 3600
"""Scan deadlines run on scheduler time: at an hour a second the default ten minutes would
time commands out before an agent can answer."""


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def startup_allowance(broker_kind: str) -> float:
    """Wall seconds a fresh worker may take to start consuming (tansu admits a new consumer
    group slowly): a clock set to reach an instant after this has not reached it before the
    worker can see it coming."""
    return 24.0 if broker_kind == "tansu" else 15.0


def scaled_settings(
    make_settings, speed: float, *, at: datetime | None = None, after_seconds: float = 0.0
) -> tuple[Settings, ScaledClock]:
    """Settings whose workers' clock runs at `speed` and reads `at` (default: now) after
    `after_seconds`, and the same clock for the test."""
    origin = datetime.now(UTC) + timedelta(seconds=after_seconds)
    start = at or origin
    settings = make_settings(clock_speed=speed, clock_origin=origin, clock_start=start)
    return settings, ScaledClock(speed, origin, start)


# --- DST days -------------------------------------------------------------------------------

AMSTERDAM = "Europe/Amsterdam"
DAILY_AT_TWO = {"kind": "cron", "expression": "0 2 * * *"}
HOUR_PER_SECOND = 3600.0


async def start_dst_day(
    make_settings, workers, broker_kind: str, day_start: datetime
) -> tuple[Settings, ScaledClock]:
    """A worker whose clock reaches the hour before local midnight `day_start` once it has
    had time to start."""
    settings, clock = scaled_settings(
        make_settings,
        HOUR_PER_SECOND,
        at=day_start - HOUR,
        after_seconds=startup_allowance(broker_kind),
    )
    workers(settings)
    return settings, clock


async def add_daily_schedules(bench: ScheduleHarness, policies: dict[str, dict]) -> None:
    """One daily 02:00 Amsterdam schedule per entry, each with its own host."""
    await bench.configure(scan_timeout_seconds=LONGEST_SCAN_TIMEOUT)
    for schedule_id, fields in policies.items():
        await bench.add_hosts(f"{schedule_id}-host")
        await bench.upsert(
            schedule_id,
            recurrence=DAILY_AT_TWO,
            timezone=AMSTERDAM,
            targets={"object_ids": [f"{schedule_id}-host"]},
            **fields,
        )
    await bench.wait_for_schedules(*policies)


def assert_created_before(bench: ScheduleHarness, day_start: datetime, *ids: str) -> None:
    for schedule_id in ids:
        state = bench.log.state(schedule_id)
        assert state is not None and state.created_at < day_start, (
            f"{schedule_id} was created at {state and state.created_at}, after the DST day "
            "began: the worker took longer than the startup allowance"
        )


async def test_daily_two_oclock_runs_once_at_three_on_the_spring_forward_day(
    make_settings, workers, broker_kind: str
) -> None:
    # 2026-03-29 in Amsterdam: 02:00 CET jumps to 03:00 CEST, so 02:00 never happens.
    day_start, shifted_run, next_day_run = (
        utc(2026, 3, 28, 23),  # 00:00 CET
        utc(2026, 3, 29, 1),  # 03:00 CEST, the first instant after the gap
        utc(2026, 3, 30, 0),  # 02:00 CEST
    )
    settings, clock = await start_dst_day(make_settings, workers, broker_kind, day_start)
    async with schedule_harness(settings) as bench:
        await add_daily_schedules(bench, {"shifted": {}, "skipping": {"dst_policy": "skip"}})
        assert_created_before(bench, day_start, "shifted", "skipping")
        await wait_until(
            lambda: bench.commands("shifted"), timeout=30, what="the spring-forward day's run"
        )
        await sleep_until(clock, shifted_run + 2 * HOUR)  # Room for a stray second run.

    commands = bench.commands("shifted")
    assert [due_at(c) for c in commands] == [shifted_run]
    assert [c["command_id"] for c in commands] == [
        occurrence_command_id("shifted", shifted_run, "shifted-host")
    ]
    assert bench.log.occurrences("shifted") == [shifted_run]
    shifted = bench.log.state("shifted")
    assert shifted is not None and shifted.next_fire_at == next_day_run
    # Under "skip" the day has no run at all: the next one is the next day's.
    assert bench.commands("skipping") == [] and bench.log.occurrences("skipping") == []
    skipping = bench.log.state("skipping")
    assert skipping is not None and skipping.next_fire_at == next_day_run


async def test_daily_two_oclock_runs_once_at_the_first_two_on_the_fall_back_day(
    make_settings, workers, broker_kind: str
) -> None:
    # 2026-10-25 in Amsterdam: 03:00 CEST falls back to 02:00 CET, so 02:00 happens twice.
    day_start, first_two, second_two, next_day_run = (
        utc(2026, 10, 24, 22),  # 00:00 CEST
        utc(2026, 10, 25, 0),  # 02:00 CEST
        utc(2026, 10, 25, 1),  # 02:00 CET
        utc(2026, 10, 26, 1),  # 02:00 CET
    )
    settings, clock = await start_dst_day(make_settings, workers, broker_kind, day_start)
    async with schedule_harness(settings) as bench:
        policies = {"once": {}, "twice": {"dst_policy": "run_both", "overlap": "allow"}}
        await add_daily_schedules(bench, policies)
        assert_created_before(bench, day_start, "once", "twice")
        await wait_until(
            lambda: len(bench.log.occurrences("twice")) == 2,
            timeout=30,
            what="both runs of the repeated 02:00",
        )
        await sleep_until(clock, second_two + 2 * HOUR)  # Room for a stray second run.

    commands = bench.commands("once")
    assert [due_at(c) for c in commands] == [first_two]
    assert [c["command_id"] for c in commands] == [
        occurrence_command_id("once", first_two, "once-host")
    ]
    assert bench.log.occurrences("once") == [first_two]
    assert bench.log.occurrences("twice") == [first_two, second_two]
    assert {due_at(c) for c in bench.commands("twice")} <= {first_two, second_two}
    for schedule_id in ("once", "twice"):
        state = bench.log.state(schedule_id)
        assert state is not None and state.next_fire_at == next_day_run


# --- catch-up after an outage ---------------------------------------------------------------

MINUTE_PER_SECOND = 60.0
EVERY_TWO_MINUTES = {"kind": "cron", "expression": "*/2 * * * *"}
TWO_MINUTES = 2 * MINUTE
ALL_WINDOW = timedelta(seconds=250)
"""Two or three of the missed occurrences, never all of an outage of four or more."""
CATCH_UP = {
    "catch-skip": {"catchup": "skip"},
    "catch-once": {"catchup": "once"},
    "catch-all": {"catchup": "all", "catchup_window_seconds": ALL_WINDOW.seconds},
}
TANSU_REJOIN = "multi-worker rebalancing is proved on Apache Kafka; tansu stalls rejoins"


def caught_up(schedule_id: str, missed: list[datetime], now: datetime) -> list[datetime]:
    """The occurrences a catch-up policy runs when `missed` all come due at `now`, as
    `CatchupPolicy` words it: skip runs only one still on time, once the latest, all every
    one within the window."""
    policy = CATCH_UP[schedule_id]["catchup"]
    if policy == "skip":
        return [o for o in missed if now - o <= MISFIRE_TOLERANCE][-1:]
    window = ALL_WINDOW if policy == "all" else timedelta(days=1)
    in_window = [o for o in missed if now - o <= window]
    return in_window if policy == "all" else in_window[-1:]


def first_decision_after(
    bench: ScheduleHarness, schedule_id: str, instant: datetime
) -> tuple[datetime, datetime] | None:
    """(cursor before `instant`, the instant of the first decision after it that moved the
    cursor): when the missed occurrences came due together."""
    states = [change.state for change in bench.log.states(schedule_id) if change.state]
    before = [state for state in states if state.updated_at < instant]
    if not before:
        return None
    cursor = before[-1].cursor
    decided = [s for s in states if s.updated_at >= instant and s.cursor > cursor]
    return (cursor, decided[0].updated_at) if decided else None


async def quiet_after_an_occurrence(
    bench: ScheduleHarness, clock: ScaledClock, schedule_ids: list[str], period: timedelta
) -> None:
    """Wait until just after an occurrence that every schedule ran and finished, so that an
    outage starting then leaves no host busy."""
    for _ in range(3):
        occurrence = grid_before(clock.now(), period) + period
        await sleep_until(clock, occurrence)
        while clock.now() < occurrence + period / 3:
            states = [bench.log.state(schedule_id) for schedule_id in schedule_ids]
            if all(
                state is not None and state.last_occurrence == occurrence and not state.in_flight
                for state in states
            ):
                return
            await asyncio.sleep(0.02)
    raise AssertionError("no occurrence ran and finished within a third of the period")


@pytest.mark.parametrize("outage", ["restart", "suspend"])
async def test_occurrences_missed_in_an_outage_are_caught_up_by_each_policy(
    make_settings, workers, broker_kind: str, outage: str
) -> None:
    if outage == "restart" and broker_kind == "tansu":
        pytest.skip(TANSU_REJOIN)
    settings, clock = scaled_settings(make_settings, MINUTE_PER_SECOND)
    worker = workers(settings)
    async with schedule_harness(settings) as bench:
        await bench.configure(scan_timeout_seconds=LONGEST_SCAN_TIMEOUT)
        for schedule_id, fields in CATCH_UP.items():
            await bench.add_hosts(f"{schedule_id}-host")
            await bench.upsert(
                schedule_id,
                recurrence=EVERY_TWO_MINUTES,
                targets={"object_ids": [f"{schedule_id}-host"]},
                overlap="allow",  # A catch-up run is never held back by one still in flight.
                **fields,
            )
        if broker_kind == "tansu":
            # A round trip through tansu's fetches outlasts the period: never quiet there.
            await wait_until(
                lambda: all(bench.log.occurrences(schedule_id) for schedule_id in CATCH_UP),
                timeout=30,
                what="a first run of every schedule",
            )
        else:
            await quiet_after_an_occurrence(bench, clock, list(CATCH_UP), TWO_MINUTES)
        began = clock.now()
        # Back after the fourth missed occurrence; a suspended worker 90 s after it, too late
        # for "skip" to run it.
        back = grid_before(began, TWO_MINUTES) + 4 * TWO_MINUTES + 90 * SECOND
        if outage == "restart":
            worker.stop()
            began = clock.now()
            await sleep_until(clock, back - 60 * SECOND)
            workers(settings)  # Same group, same changelogs: the state is recovered.
        else:
            with suspended(worker):
                await sleep_until(clock, back)

        def ran_after_catching_up(schedule_id: str) -> bool:
            decision = first_decision_after(bench, schedule_id, began)
            occurrences = bench.log.occurrences(schedule_id)
            if decision is None or not occurrences or occurrences[-1] <= decision[1]:
                return False
            # Queued catch-up runs may still be recording while a later one already has.
            cursor, decided_at = decision
            missed = grid_between(cursor, decided_at, TWO_MINUTES)
            return set(caught_up(schedule_id, missed, decided_at)) <= set(occurrences)

        await wait_until(
            lambda: all(ran_after_catching_up(schedule_id) for schedule_id in CATCH_UP),
            timeout=30,
            what="the catch-up and a regular occurrence after it, for every schedule",
        )

        def commands_arrived() -> bool:
            for schedule_id in CATCH_UP:
                issued = {due_at(c) for c in bench.commands(schedule_id)}
                runs = bench.log.runs(schedule_id)
                fired = {r.occurrence for r in runs if r.outcome == "fired" and r.attempt == 1}
                if not fired <= issued:
                    return False
            return True

        await wait_until(commands_arrived, timeout=20, what="the fired runs' commands")

    ran: dict[str, list[datetime]] = {}
    for schedule_id in CATCH_UP:
        decision = first_decision_after(bench, schedule_id, began)
        assert decision is not None
        cursor, decided_at = decision
        missed = grid_between(cursor, decided_at, TWO_MINUTES)
        assert len(missed) >= 4, f"the outage was too short to prove anything: {missed}"
        ran[schedule_id] = [
            o for o in bench.log.occurrences(schedule_id) if cursor < o <= decided_at
        ]
        assert ran[schedule_id] == caught_up(schedule_id, missed, decided_at), (
            schedule_id,
            missed,
            decided_at,
        )
        # Whatever fired sent its occurrence's command; with no host busy, the first did.
        host = f"{schedule_id}-host"
        issued = {due_at(c): c["command_id"] for c in bench.commands(schedule_id)}
        fired = [
            run.occurrence
            for run in bench.log.runs(schedule_id)
            if run.occurrence in ran[schedule_id] and run.outcome == "fired"
        ]
        assert fired[:1] == ran[schedule_id][:1] or broker_kind == "tansu"
        if schedule_id == "catch-all" and broker_kind != "tansu":
            # Queued one after another, every caught-up occurrence reached its host.
            assert fired == ran[schedule_id]
        for occurrence in fired:
            assert issued[occurrence] == occurrence_command_id(schedule_id, occurrence, host)
    # "skip" runs an occurrence only while it is on time; a restart may come back in time.
    # One due after the worker was back is on time (a slow broker can delay the decision).
    skipped_missed = [o for o in ran["catch-skip"] if o <= back]
    assert skipped_missed == [] if outage == "suspend" else len(skipped_missed) <= 1
    assert len(ran["catch-once"]) == 1
    assert 2 <= len(ran["catch-all"]) <= 3  # The window holds two or three, of four or more.


# --- overlap ---------------------------------------------------------------------------------

EVERY_MINUTE = {"kind": "cron", "expression": "* * * * *"}
HALF_A_MINUTE_PER_SECOND = 30.0
OVERLAP = ("skip", "buffer_one", "allow")


def due_while_in_flight(bench: ScheduleHarness, schedule_id: str, run: datetime) -> list[datetime]:
    """Occurrences that came due while the run of occurrence `run` was in flight, as the
    worker's own states show them (the cursor moved past them with that run in flight)."""
    due = set()
    for change in bench.log.states(schedule_id):
        state = change.state
        if state and state.cursor > run and any(r.occurrence == run for r in state.in_flight):
            due.add(state.cursor)
    return sorted(due)


async def test_overlap_policies_while_a_run_waits_for_a_slow_host(make_settings, workers) -> None:
    settings, clock = scaled_settings(make_settings, HALF_A_MINUTE_PER_SECOND)
    workers(settings)
    held: dict[str, dict[str, Any]] = {}

    def answer(command: dict[str, Any]) -> bool:
        """The slow host keeps each schedule's first command until the test lets it go."""
        schedule_id = command.get("schedule_id")
        if command["host_id"] != "slow" or schedule_id is None or schedule_id in held:
            return True
        held[schedule_id] = command
        return False

    async with schedule_harness(settings, answer=answer) as bench:
        await bench.configure(scan_timeout_seconds=LONGEST_SCAN_TIMEOUT, max_concurrent_scans=50)
        await bench.add_hosts("fast", "slow")
        for policy in OVERLAP:
            # A scanner each: one schedule's command in flight does not make a host busy for
            # the others.
            await bench.upsert(
                policy,
                recurrence=EVERY_MINUTE,
                scanner=f"scan-{policy.replace('_', '-')}",
                targets={"object_ids": ["fast", "slow"]},
                overlap=policy,
            )
        await wait_until(lambda: len(held) == 3, timeout=30, what="a first run of each")
        first = {policy: due_at(held[policy]) for policy in OVERLAP}
        await wait_until(
            lambda: (
                all(len(due_while_in_flight(bench, p, first[p])) >= 2 for p in OVERLAP)
                and len(bench.log.occurrences("allow")) >= 2
            ),
            timeout=30,
            what="two more occurrences of each while the slow host holds the first run",
        )
        released_at = clock.now()
        for command in held.values():
            bench.fleet.answer_later(command)

        def went_on(policy: str) -> bool:
            blocked = due_while_in_flight(bench, policy, first[policy])
            state = bench.log.state(policy)
            if state is None or any(r.occurrence == first[policy] for r in state.in_flight):
                return False
            if policy == "buffer_one":
                return len([c for c in bench.commands(policy) if due_at(c) == blocked[-1]]) == 2
            return bench.log.occurrences(policy)[-1] >= blocked[-1]

        await wait_until(
            lambda: all(went_on(policy) for policy in OVERLAP),
            timeout=30,
            what="the first runs to end and the schedules to go on",
        )

    def ran_while_blocked(policy: str) -> tuple[list[datetime], list[datetime]]:
        """(occurrences due while the first run was in flight, those of them that ran)"""
        blocked = due_while_in_flight(bench, policy, first[policy])
        return blocked, [o for o in bench.log.occurrences(policy) if o in blocked]

    # skip: occurrences that come due while the run is in flight never run.
    blocked, ran = ran_while_blocked("skip")
    assert len(blocked) >= 2 and ran == []
    assert not {due_at(c) for c in bench.commands("skip")} & set(blocked)

    # buffer_one: the latest of them waits, and starts when the slow host has answered.
    blocked, ran = ran_while_blocked("buffer_one")
    assert len(blocked) >= 2 and ran == blocked[-1:]
    (started,) = [r for r in bench.log.runs("buffer_one") if r.occurrence == blocked[-1]]
    assert started.fired_at >= released_at
    late = [c for c in bench.commands("buffer_one") if due_at(c) == blocked[-1]]
    assert all(datetime.fromisoformat(c["issued_at"]) >= released_at for c in late)
    assert {c["command_id"] for c in late} == {
        occurrence_command_id("buffer_one", blocked[-1], host) for host in ("fast", "slow")
    }

    # allow: every one starts beside the slow run; the slow host, busy until the test lets
    # its command go, is passed over by those sent out before that.
    blocked, ran = ran_while_blocked("allow")
    assert len(blocked) >= 2 and ran == blocked
    beside = [
        r for r in bench.log.runs("allow") if r.occurrence in blocked and r.fired_at < released_at
    ]
    assert beside and all(r.hosts_matched == 2 and r.commands_issued <= 1 for r in beside)
    slow = {due_at(c) for c in bench.commands("allow") if c["host_id"] == "slow"}
    assert not slow & {r.occurrence for r in beside}


# --- grace period ----------------------------------------------------------------------------

TEN_MINUTES_PER_SECOND = 600.0
ON_DEMAND = {"kind": "none"}


async def run_now(bench: ScheduleHarness, *schedule_ids: str) -> list[ScheduleTriggered]:
    """Trigger a run of each schedule and wait until their commands have been answered."""
    triggers = [schedule_triggered(schedule_id) for schedule_id in schedule_ids]
    for trigger in triggers:
        await bench.send_change(trigger)

    def finished(trigger: ScheduleTriggered) -> bool:
        state = bench.log.state(trigger.schedule_id)
        concluded = state is not None and state.last_success_at is not None and not state.in_flight
        # The run record travels on its own topic, so it may arrive after the state.
        recorded = trigger.occurred_at in bench.log.occurrences(trigger.schedule_id)
        return concluded and recorded

    await wait_until(
        lambda: all(finished(trigger) for trigger in triggers),
        timeout=30,
        what=f"finished runs of {', '.join(schedule_ids)}",
    )
    return triggers


async def test_grace_period_skips_a_host_this_scanner_finished_recently(
    make_settings, workers
) -> None:
    settings, clock = scaled_settings(make_settings, TEN_MINUTES_PER_SECOND)
    workers(settings)
    async with schedule_harness(settings) as bench:
        await bench.configure(scan_timeout_seconds=LONGEST_SCAN_TIMEOUT)
        await bench.add_hosts("never", "earlier", "recently")
        # Scans of other schedules: nmap on two hosts, some time apart; nikto on the third.
        helpers = {"nmap-earlier": "earlier", "nmap-recently": "recently", "nikto": "never"}
        for schedule_id, host in helpers.items():
            await bench.upsert(
                schedule_id,
                recurrence=ON_DEMAND,
                scanner=schedule_id.split("-")[0],
                targets={"object_ids": [host]},
            )
        await bench.upsert(
            "graced",
            recurrence=ON_DEMAND,
            targets={"object_ids": ["never", "earlier", "recently"]},
            grace_period_seconds=3600,
        )
        await bench.wait_for_schedules(*helpers, "graced")
        await run_now(bench, "nikto", "nmap-earlier")
        (earlier,) = bench.commands("nmap-earlier")
        await sleep_until(clock, datetime.fromisoformat(earlier["issued_at"]) + 80 * MINUTE)
        await run_now(bench, "nmap-recently")
        (trigger,) = await run_now(bench, "graced")

    (recently,) = bench.commands("nmap-recently")
    (run,) = bench.log.runs("graced")
    # What the grace period of an hour was measured against.
    assert run.fired_at - datetime.fromisoformat(recently["issued_at"]) < 45 * MINUTE
    assert run.fired_at - datetime.fromisoformat(earlier["issued_at"]) > 75 * MINUTE
    assert sorted(c["host_id"] for c in bench.commands("graced")) == ["earlier", "never"]
    assert {c["command_id"] for c in bench.commands("graced")} == {
        occurrence_command_id("graced", trigger.occurred_at, host) for host in ("earlier", "never")
    }
    assert (run.hosts_matched, run.commands_issued) == (2, 2)


# --- triggers on update and delete ----------------------------------------------------------


async def test_update_and_delete_triggers_run_for_that_host_only(make_settings, workers) -> None:
    settings = make_settings()
    workers(settings)
    async with schedule_harness(settings) as bench:
        await bench.add_hosts("web-1", labels={"env": "dev"})
        on_update = {"run_on": "host", "operation": "updated"}
        prod = {"field": "labels.env", "op": "eq", "value": "prod"}
        await bench.upsert(
            "on-update", recurrence=ON_DEMAND, trigger=on_update, targets={"filter": prod}
        )
        on_delete = {"run_on": "host", "operation": "deleted"}
        await bench.upsert("on-delete", recurrence=ON_DEMAND, scanner="nikto", trigger=on_delete)
        await bench.wait_for_schedules("on-update", "on-delete")
        await asyncio.sleep(2.0)  # Workers read trigger schedules from kairos-schedules.
        # Per host in this order: a trigger that fired for an earlier event shows up first.
        created = host_created("web-2", labels={"env": "prod"})
        promoted = host_updated("web-2", labels={"env": "prod", "tier": "front"})
        demoted = host_updated("web-1", labels={"env": "dev", "tier": "back"})
        deleted = host_deleted("web-1")
        for event in (created, promoted, demoted, deleted):
            await bench.send_object(event)
        await wait_until(
            lambda: (
                len(bench.log.runs("on-update")) == 2
                and bench.commands("on-delete")
                and bench.log.runs("on-delete")
            ),
            timeout=20,
            what="the trigger runs of both updates and of the delete",
        )

    runs = {run.occurrence: run for run in bench.log.runs("on-update")}
    # Both updates ran the schedule (the one outside the filter scanned nothing); the
    # creation and the deletion did not.
    assert sorted(runs) == sorted([promoted.occurred_at, demoted.occurred_at])
    assert runs[promoted.occurred_at].commands_issued == 1
    assert (runs[demoted.occurred_at].outcome, runs[demoted.occurred_at].commands_issued) == (
        "skipped",
        0,
    )
    (command,) = bench.commands("on-update")
    assert command["host_id"] == "web-2" and command["reason"] == "trigger"
    assert command["command_id"] == occurrence_command_id(
        "on-update", promoted.occurred_at, "web-2"
    )
    # The deleted host is scanned once more, by what its delete event said of it.
    assert [run.occurrence for run in bench.log.runs("on-delete")] == [deleted.occurred_at]
    (command,) = bench.commands("on-delete")
    assert (command["host_id"], command["scanner"], command["reason"]) == (
        "web-1",
        "nikto",
        "trigger",
    )
    assert command["command_id"] == occurrence_command_id("on-delete", deleted.occurred_at, "web-1")


# --- retries, self-disable, skipped runs --------------------------------------------------------


async def test_failed_runs_retry_with_backoff_then_disable_the_schedule_but_skips_never_count(
    make_settings, workers
) -> None:
    settings, _ = scaled_settings(make_settings, TEN_MINUTES_PER_SECOND)
    workers(settings)

    def score(command: dict[str, Any]) -> float | None:
        return None if command.get("schedule_id") == "brittle" else 100

    async with schedule_harness(settings, score_for=score) as bench:
        await bench.configure(scan_timeout_seconds=LONGEST_SCAN_TIMEOUT)
        await bench.add_hosts("brittle-1")
        await bench.upsert(
            "brittle", recurrence=ON_DEMAND, targets={"object_ids": ["brittle-1"]}, max_retries=2
        )
        # Every ten scheduler minutes, a run that finds no host: skipped, with no retries left.
        nowhere = {"field": "labels.env", "op": "eq", "value": "nowhere"}
        await bench.upsert(
            "idle",
            recurrence={"kind": "cron", "expression": "*/10 * * * *"},
            targets={"filter": nowhere},
            max_retries=0,
        )
        await bench.wait_for_schedules("brittle", "idle")
        trigger = schedule_triggered("brittle")
        await bench.send_change(trigger)

        def disabled() -> bool:
            state = bench.log.state("brittle")
            return state is not None and not state.enabled

        await wait_until(disabled, timeout=30, what="the schedule to disable itself")
        await wait_until(
            lambda: len(bench.log.failures("brittle")) == 3, timeout=20, what="three failed runs"
        )
        await wait_until(
            lambda: len(bench.log.runs("idle")) >= 3, timeout=20, what="three idle runs"
        )

    commands = bench.commands("brittle", attempt=None)
    assert [(c["attempt"], c["host_id"]) for c in commands] == [(n, "brittle-1") for n in (1, 2, 3)]
    assert [c["command_id"] for c in commands] == [
        occurrence_command_id("brittle", trigger.occurred_at, "brittle-1", attempt)
        for attempt in (1, 2, 3)
    ]
    # Each retry is due 2^n minutes after the n-th failure in a row.
    states = [change.state for change in bench.log.states("brittle") if change.state]
    for attempt, backoff in ((2, 2 * MINUTE), (3, 4 * MINUTE)):
        planned = next(s for s in states if s.retry and s.retry.attempt == attempt)
        assert planned.retry is not None and planned.consecutive_failures == attempt - 1
        assert planned.retry.due_at - planned.updated_at == backoff
        assert due_at(commands[attempt - 1]) == planned.retry.due_at
    failures = bench.log.failures("brittle")
    assert [(f.attempt, f.error) for f in failures] == [(n, "simulated failure") for n in (1, 2, 3)]
    final = bench.log.state("brittle")
    assert final is not None and schedule_status(final) is ScheduleStatus.DISABLED
    reason = "disabled after 3 failed runs in a row; last error: simulated failure"
    assert (final.disabled_reason, final.failed_runs, final.consecutive_failures) == (reason, 3, 3)
    assert final.retry is None and final.in_flight == ()
    (disabling,) = [e for e in bench.log.changes("brittle") if isinstance(e, ScheduleDisabled)]
    assert (disabling.actor, disabling.reason) == ("kairos", reason)

    idle = bench.log.state("idle")
    outcomes = {(run.outcome, run.commands_issued) for run in bench.log.runs("idle")}
    assert outcomes == {("skipped", 0)}
    assert idle is not None and idle.enabled and idle.skipped_runs >= 3
    assert (idle.failed_runs, idle.consecutive_failures, idle.retry) == (0, 0, None)


# --- backfill and pause ------------------------------------------------------------------------


async def test_backfill_runs_every_past_occurrence_in_the_range(make_settings, workers) -> None:
    # Real speed from noon: the daily 03:00 run is fifteen hours away all test long.
    settings, clock = scaled_settings(make_settings, 1.0, at=utc(2026, 6, 10, 12))
    workers(settings)
    async with schedule_harness(settings) as bench:
        await bench.add_hosts("archive-1")
        await bench.upsert(
            "nightly",
            recurrence={"kind": "cron", "expression": "0 3 * * *"},
            targets={"object_ids": ["archive-1"]},
        )
        await bench.wait_for_schedules("nightly")
        before = bench.log.state("nightly")
        # From midnight to the third 03:00: the end is exclusive.
        requested_at = clock.now()
        request = backfill_requested("nightly", utc(2026, 6, 7), utc(2026, 6, 9, 3))
        await bench.send_change(request)

        def concluded() -> bool:
            state = bench.log.state("nightly")
            settled = state is not None and not state.in_flight and not state.queued
            return len(bench.log.runs("nightly")) == 2 and settled

        await wait_until(concluded, timeout=20, what="both backfill runs to conclude")

    past = [utc(2026, 6, 7, 3), utc(2026, 6, 8, 3)]
    assert bench.log.occurrences("nightly") == past
    # The runs go one after another, so the host gets one command per occurrence (it runs
    # one command per scanner at a time), each due when the backfill was asked for. The
    # request keys the ids: an occurrence that ran before gets commands of its own.
    commands = bench.commands("nightly")
    backfill_id = str(request.event_id)
    assert [c["command_id"] for c in commands] == [
        occurrence_command_id("nightly", occurrence, "archive-1", backfill_id=backfill_id)
        for occurrence in past
    ]
    assert all(due_at(command) >= requested_at for command in commands)
    assert all(run.commands_issued == 1 for run in bench.log.runs("nightly"))
    # A backfill neither counts as a run nor moves the timetable on.
    after = bench.log.state("nightly")
    assert before is not None and after is not None
    assert (after.runs, after.cursor, after.next_fire_at) == (0, before.cursor, utc(2026, 6, 11, 3))


PAUSED = {"paused-once": {"catchup": "once"}, "paused-skip": {"catchup": "skip"}}


def paused_span(bench: ScheduleHarness, schedule_id: str) -> tuple[datetime, datetime] | None:
    """(cursor when the schedule was paused, instant the resume was decided), once resumed."""
    states = [change.state for change in bench.log.states(schedule_id) if change.state]
    paused = next((i for i, state in enumerate(states) if state.paused), None)
    if paused is None:
        return None
    resumed = next((s for s in states[paused:] if not s.paused), None)
    return (states[paused].cursor, resumed.updated_at) if resumed else None


async def test_resume_catches_up_the_paused_time_by_the_catchup_policy(
    make_settings, workers
) -> None:
    settings, clock = scaled_settings(make_settings, MINUTE_PER_SECOND)
    workers(settings)
    async with schedule_harness(settings) as bench:
        await bench.configure(scan_timeout_seconds=LONGEST_SCAN_TIMEOUT)
        for schedule_id, fields in PAUSED.items():
            await bench.add_hosts(f"{schedule_id}-host")
            await bench.upsert(
                schedule_id,
                recurrence=EVERY_TWO_MINUTES,
                targets={"object_ids": [f"{schedule_id}-host"]},
                overlap="allow",
                **fields,
            )
        await wait_until(
            lambda: all(bench.log.occurrences(schedule_id) for schedule_id in PAUSED),
            timeout=30,
            what="a first run of each",
        )
        first = max(bench.log.occurrences(schedule_id)[0] for schedule_id in PAUSED)
        await sleep_until(clock, first + 40 * SECOND)
        for schedule_id in PAUSED:
            await bench.send_change(schedule_paused(schedule_id))

        def paused_at(schedule_id: str) -> datetime | None:
            state = bench.log.state(schedule_id)
            return state.cursor if state is not None and state.paused else None

        await wait_until(
            lambda: all(paused_at(schedule_id) for schedule_id in PAUSED),
            timeout=30,
            what="both schedules paused",
        )
        last_run = max(paused_at(schedule_id) or first for schedule_id in PAUSED)
        # Resume 90 s after the second paused occurrence: too late for "skip" to run it.
        await sleep_until(clock, last_run + 2 * TWO_MINUTES + 90 * SECOND)
        for schedule_id in PAUSED:
            await bench.send_change(schedule_resumed(schedule_id))

        def went_on(schedule_id: str) -> bool:
            span = paused_span(bench, schedule_id)
            occurrences = bench.log.occurrences(schedule_id)
            return span is not None and occurrences[-1] > span[1]

        await wait_until(
            lambda: all(went_on(schedule_id) for schedule_id in PAUSED),
            timeout=30,
            what="a regular run of each after the resume",
        )

    for schedule_id in PAUSED:
        span = paused_span(bench, schedule_id)
        assert span is not None
        cursor, resumed_at = span
        missed = grid_between(cursor, resumed_at, TWO_MINUTES)
        assert len(missed) >= 2, f"the pause held too few occurrences: {missed}"
        ran = [o for o in bench.log.occurrences(schedule_id) if cursor < o <= resumed_at]
        runs = {run.occurrence: run for run in bench.log.runs(schedule_id)}
        assert all(runs[o].fired_at >= resumed_at for o in ran), "a run started while paused"
        if schedule_id == "paused-once":
            assert ran == missed[-1:]
            (command,) = [c for c in bench.commands(schedule_id) if due_at(c) == missed[-1]]
            expected = occurrence_command_id(schedule_id, missed[-1], f"{schedule_id}-host")
            assert command["command_id"] == expected
        else:
            assert ran == [o for o in missed if resumed_at - o <= MISFIRE_TOLERANCE][-1:]
