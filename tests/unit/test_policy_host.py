"""The adaptive schedule of one host: `decide` and `wake_at` with written-out instants."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.base import CommandReason, ComplianceState, HostStatus
from schemas.config import SchedulerConfig
from schemas.internal import ReleaseOutcome, SlotReleased
from schemas.results import ScanCompleted
from schemas.state import HostSchedule
from streams.due_index import DueIndex, seconds_to_next_tick
from streams.policy.host import Decision, HostInput, decide, unissued_claim, wake_at
from streams.policy.ids import command_id, event_fingerprint, spread_offset_seconds
from tests.unit.factories import (
    DEFAULT_CONFIG,
    HOST,
    NOW,
    claimed_at,
    command_issued,
    command_timed_out,
    fold,
    host_created,
    host_deleted,
    host_due,
    issued,
    issued_before_force,
    maintenance_set,
    onboarded,
    replan,
    scan_failed,
    scan_requested,
    scan_succeeded,
    scanned,
    status_changed,
)

MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)


def in_flight_id(schedule: HostSchedule | None) -> str:
    assert schedule is not None and schedule.in_flight is not None
    return schedule.in_flight.command_id


def without_bookkeeping(schedule: HostSchedule | None) -> dict[str, object]:
    assert schedule is not None
    return schedule.model_dump(exclude={"recent_event_ids"})


# --- onboarding ---------------------------------------------------------------------


def test_created_host_is_unknown_and_claimed_at_once() -> None:
    decision = decide(None, host_created(at=NOW), now=NOW, config=DEFAULT_CONFIG)

    schedule = decision.schedule
    assert schedule is not None and decision.changed
    assert schedule.host_id == HOST
    assert schedule.state is ComplianceState.UNKNOWN
    assert schedule.compliance_state is ComplianceState.UNKNOWN
    assert schedule.scan_priority == 10
    assert schedule.next_scheduled_scan == NOW
    assert schedule.version == 1
    [request] = decision.dispatch
    assert request.reason is CommandReason.UNKNOWN
    assert request.priority == 10
    assert request.due_at == NOW
    assert request.host_id == HOST
    assert (
        request.command_id == in_flight_id(schedule) == command_id(HOST, 1, 1, schedule.incarnation)
    )
    assert schedule.in_flight is not None and schedule.in_flight.claimed_at == NOW


def test_an_event_ids_fingerprint_is_the_same_from_the_uuid_or_its_text() -> None:
    # States store fingerprints: one taken from the text before must still match.
    for event_id in (uuid.uuid4(), uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)):
        assert event_fingerprint(event_id) == event_fingerprint(str(event_id))
        assert len(event_fingerprint(event_id)) == 16


@given(
    host_id=st.text(min_size=1, max_size=40),
    due_instance=st.integers(min_value=0, max_value=2**40),
    attempt=st.integers(min_value=1, max_value=100),
    incarnation=st.one_of(st.just(""), st.uuids().map(str)),
)
def test_a_command_id_is_the_uuid5_of_its_host_instance_and_attempt(
    host_id: str, due_instance: int, attempt: int, incarnation: str
) -> None:
    # Commands already issued and states already stored carry ids made by `uuid.uuid5`.
    name = f"{host_id}/{incarnation}/{due_instance}/{attempt}"
    namespace = uuid.UUID("6f1c4a52-8a3e-4d67-9d1b-5f7c0e2b9a10")
    assert command_id(host_id, due_instance, attempt, incarnation) == str(
        uuid.uuid5(namespace, name)
    )


def test_duplicate_created_event_is_a_no_op() -> None:
    created = host_created(at=NOW)
    first = decide(None, created, now=NOW, config=DEFAULT_CONFIG).schedule

    later = NOW + 10 * MINUTE
    again = decide(first, created, now=later, config=DEFAULT_CONFIG)

    assert again.ignored == "duplicate_event"
    assert again.schedule == first
    assert not again.changed
    assert again.dispatch == () and again.releases == ()


def test_created_event_for_known_host_updates_attributes() -> None:
    schedule = onboarded(at=NOW)

    later = NOW + MINUTE
    event = host_created(at=later, hostname="db-01.example.test", organization="acme")
    decision = decide(schedule, event, now=later, config=DEFAULT_CONFIG)

    after = decision.schedule
    assert after is not None and decision.changed
    assert after.attributes.hostname == "db-01.example.test"
    assert after.attributes.organization == "acme"
    assert after.version == schedule.version + 1
    assert in_flight_id(after) == in_flight_id(schedule)  # Same claim, not a second one.
    assert decision.dispatch == ()


def test_an_update_with_the_same_attributes_is_not_a_new_version() -> None:
    # A new event id alone changes no schedule: the attributes compare equal as they are.
    labels = {"team": "blue", "env": "prod"}
    schedule = decide(
        onboarded(at=NOW),
        host_created(at=NOW, hostname="db-01", labels=labels),
        now=NOW,
        config=DEFAULT_CONFIG,
    ).schedule
    assert schedule is not None

    later = NOW + MINUTE
    again = host_created(at=later, hostname="db-01", labels=dict(labels))
    decision = decide(schedule, again, now=later, config=DEFAULT_CONFIG)

    assert decision.schedule is not None
    assert decision.schedule.version == schedule.version
    assert decision.schedule.attributes == schedule.attributes
    relabelled = host_created(at=later, hostname="db-01", labels={"team": "red"})
    changed = decide(schedule, relabelled, now=later, config=DEFAULT_CONFIG).schedule
    assert changed is not None and changed.version == schedule.version + 1
    assert changed.attributes.labels == {"team": "red"}


def test_created_event_can_mark_known_host_inactive() -> None:
    schedule = scanned(completed_at=NOW)

    later = NOW + 2 * DEFAULT_CONFIG.max_interval_minutes * MINUTE
    after = decide(
        schedule, host_created(at=later, is_active=False), now=later, config=DEFAULT_CONFIG
    )

    assert after.schedule is not None and after.schedule.is_active is False
    assert after.schedule.in_flight is None and after.dispatch == ()


def test_initial_spread_delays_first_scan_deterministically_within_the_window() -> None:
    config = SchedulerConfig(initial_spread_seconds=3600)
    offset = spread_offset_seconds(HOST, 3600)
    assert 0 < offset < 3600

    decision = decide(None, host_created(at=NOW), now=NOW, config=config)

    assert decision.schedule is not None
    assert decision.schedule.next_scheduled_scan == NOW + timedelta(seconds=offset)
    assert decision.schedule.in_flight is None and decision.dispatch == ()
    replayed = decide(None, host_created(at=NOW), now=NOW, config=config).schedule
    assert replayed is not None
    assert replayed.next_scheduled_scan == decision.schedule.next_scheduled_scan


def test_initial_spread_scatters_hosts_over_the_window() -> None:
    config = SchedulerConfig(initial_spread_seconds=3600)
    first_due = []
    for number in range(200):
        schedule = onboarded(f"host-{number:04d}", at=NOW, config=config)
        first_due.append(schedule.next_scheduled_scan)

    assert all(NOW <= due < NOW + timedelta(hours=1) for due in first_due)
    assert len(set(first_due)) > 150
    assert min(first_due) < NOW + timedelta(minutes=15)
    assert max(first_due) > NOW + timedelta(minutes=45)


def test_a_claim_never_marked_issued_is_requested_again_the_same_way() -> None:
    decision = decide(None, host_created(at=NOW), now=NOW, config=DEFAULT_CONFIG)
    schedule = decision.schedule
    assert schedule is not None
    assert unissued_claim(schedule) == decision.dispatch[0]
    assert unissued_claim(issued(schedule, at=NOW)) is None


def test_spread_host_is_claimed_when_its_first_due_time_comes() -> None:
    config = SchedulerConfig(initial_spread_seconds=3600)
    schedule = onboarded(at=NOW, config=config)
    first_due = schedule.next_scheduled_scan

    before = decide(
        schedule, host_due(at=first_due - SECOND), now=first_due - SECOND, config=config
    )
    at = decide(schedule, host_due(at=first_due), now=first_due, config=config)

    assert before.dispatch == ()
    [request] = at.dispatch
    assert request.reason is CommandReason.UNKNOWN and request.due_at == first_due


def test_object_that_is_not_a_host_is_ignored() -> None:
    decision = decide(
        None, host_created(object_type="network", at=NOW), now=NOW, config=DEFAULT_CONFIG
    )

    assert decision.schedule is None
    assert decision.ignored == "not_a_host"
    assert decision.dispatch == ()


def test_deleted_host_loses_its_schedule_and_frees_its_slot() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)

    later = NOW + MINUTE
    decision = decide(schedule, host_deleted(at=later), now=later, config=DEFAULT_CONFIG)

    assert decision.schedule is None and decision.changed
    assert list(decision.releases) == [
        SlotReleased(command_id=in_flight_id(schedule), outcome=ReleaseOutcome.SUPERSEDED),
    ]


def test_deleted_idle_host_releases_nothing() -> None:
    schedule = scanned(completed_at=NOW)

    later = NOW + MINUTE
    decision = decide(schedule, host_deleted(at=later), now=later, config=DEFAULT_CONFIG)

    assert decision.schedule is None and decision.changed
    assert list(decision.releases) == []


def test_result_after_deletion_is_ignored_as_unknown_host() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    later = NOW + MINUTE
    deleted = decide(schedule, host_deleted(at=later), now=later, config=DEFAULT_CONFIG)

    result = scan_succeeded(in_flight_id(schedule), completed_at=later + MINUTE)
    decision = decide(deleted.schedule, result, now=later + MINUTE, config=DEFAULT_CONFIG)

    assert decision.schedule is None
    assert decision.ignored == "unknown_host"
    assert decision.releases == () and decision.dispatch == ()


def test_deleting_an_unknown_host_is_ignored() -> None:
    decision = decide(None, host_deleted(at=NOW), now=NOW, config=DEFAULT_CONFIG)
    assert decision.schedule is None
    assert decision.ignored == "unknown_host"
    assert not decision.changed


# --- when a host is due -------------------------------------------------------------


def test_host_is_claimed_exactly_when_next_scheduled_scan_arrives() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)
    due = NOW + timedelta(minutes=1440)
    assert schedule.next_scheduled_scan == due

    early = decide(schedule, host_due(at=due - SECOND), now=due - SECOND, config=DEFAULT_CONFIG)
    on_time = decide(schedule, host_due(at=due), now=due, config=DEFAULT_CONFIG)

    assert early.dispatch == () and early.schedule is not None
    assert early.schedule.in_flight is None
    [request] = on_time.dispatch
    assert request.reason is CommandReason.SCHEDULED
    assert request.priority == 3
    assert request.due_at == due
    assert request.state is ComplianceState.COMPLIANT
    assert (
        request.command_id
        == in_flight_id(on_time.schedule)
        == command_id(HOST, 2, 1, on_time.schedule.incarnation)
    )


def _disabled(schedule: HostSchedule) -> tuple[HostSchedule, SchedulerConfig]:
    return schedule, DEFAULT_CONFIG.model_copy(update={"enabled": False})


def _inactive(schedule: HostSchedule) -> tuple[HostSchedule, SchedulerConfig]:
    return schedule.model_copy(update={"is_active": False}), DEFAULT_CONFIG


def _down(schedule: HostSchedule) -> tuple[HostSchedule, SchedulerConfig]:
    return schedule.model_copy(update={"status": HostStatus.DOWN}), DEFAULT_CONFIG


def _in_maintenance(schedule: HostSchedule) -> tuple[HostSchedule, SchedulerConfig]:
    update = {"maintenance_mode": True, "state": ComplianceState.MAINTENANCE}
    return schedule.model_copy(update=update), DEFAULT_CONFIG


@pytest.mark.parametrize(
    "make_not_due",
    [_disabled, _inactive, _down, _in_maintenance],
    ids=["scheduler-disabled", "inactive", "down", "maintenance"],
)
def test_overdue_host_is_not_claimed_when_not_scannable(make_not_due) -> None:
    schedule, config = make_not_due(scanned(completed_at=NOW))
    later = NOW + timedelta(days=3)

    decision = decide(schedule, host_due(at=later), now=later, config=config)

    assert decision.dispatch == ()
    assert decision.schedule is not None and decision.schedule.in_flight is None
    assert wake_at(decision.schedule, config) is None


def test_host_with_command_in_flight_is_not_claimed_again() -> None:
    schedule = onboarded(at=NOW)
    later = NOW + timedelta(days=3)

    decision = decide(schedule, host_due(at=later), now=later, config=DEFAULT_CONFIG)

    assert decision.dispatch == ()
    assert in_flight_id(decision.schedule) == in_flight_id(schedule)
    assert not decision.changed


def test_host_coming_back_up_is_claimed_if_overdue() -> None:
    schedule = scanned(completed_at=NOW)
    down_at = NOW + MINUTE
    down = decide(
        schedule,
        status_changed(status=HostStatus.DOWN, at=down_at),
        now=down_at,
        config=DEFAULT_CONFIG,
    ).schedule

    up_at = NOW + timedelta(days=2)
    decision = decide(
        down, status_changed(status=HostStatus.UP, at=up_at), now=up_at, config=DEFAULT_CONFIG
    )

    [request] = decision.dispatch
    assert request.reason is CommandReason.SCHEDULED
    assert request.due_at == NOW + timedelta(minutes=1440)


def test_re_enabled_scheduler_claims_overdue_host_on_next_input() -> None:
    disabled = DEFAULT_CONFIG.model_copy(update={"enabled": False})
    schedule = scanned(completed_at=NOW)
    later = NOW + timedelta(days=2)
    assert decide(schedule, host_due(at=later), now=later, config=disabled).dispatch == ()

    decision = decide(schedule, host_due(at=later), now=later, config=DEFAULT_CONFIG)

    assert len(decision.dispatch) == 1


# --- command ids --------------------------------------------------------------------


def test_replayed_claim_keeps_the_same_command_id() -> None:
    created = host_created(at=NOW)
    first = decide(None, created, now=NOW, config=DEFAULT_CONFIG)
    replayed = decide(None, created, now=NOW, config=DEFAULT_CONFIG)

    assert first.dispatch == replayed.dispatch
    assert in_flight_id(first.schedule) == in_flight_id(replayed.schedule)


def test_command_id_is_the_same_for_the_same_host_instance_and_attempt() -> None:
    assert command_id(HOST, 3, 2) == command_id(HOST, 3, 2)
    ids = {command_id(h, d, a) for h in (HOST, "host-0002") for d in (1, 2) for a in (1, 2)}
    assert len(ids) == 8


def test_retry_after_failure_gets_a_new_command_id() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    failed_at = NOW + 5 * MINUTE
    failed = decide(
        schedule,
        scan_failed(in_flight_id(schedule), completed_at=failed_at),
        now=failed_at,
        config=DEFAULT_CONFIG,
    ).schedule
    assert failed is not None

    retry = claimed_at(failed, failed_at + timedelta(seconds=300), DEFAULT_CONFIG)

    assert in_flight_id(retry) != in_flight_id(schedule)
    assert in_flight_id(retry) == command_id(HOST, 1, 2, retry.incarnation)
    assert retry.in_flight is not None and retry.in_flight.attempt == 2


def test_retry_after_timeout_gets_a_new_command_id() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    assert schedule.in_flight is not None and schedule.in_flight.deadline is not None
    deadline = schedule.in_flight.deadline
    timed_out = decide(
        schedule,
        command_timed_out(in_flight_id(schedule), deadline=deadline),
        now=deadline,
        config=DEFAULT_CONFIG,
    ).schedule
    assert timed_out is not None

    retry = claimed_at(timed_out, deadline + timedelta(seconds=300), DEFAULT_CONFIG)

    assert in_flight_id(retry) != in_flight_id(schedule)
    assert retry.in_flight is not None and retry.in_flight.reason is CommandReason.RETRY


def test_next_due_instance_gets_a_new_command_id() -> None:
    schedule = scanned(completed_at=NOW)
    first_id = command_id(HOST, 1, 1)

    nxt = claimed_at(schedule, schedule.next_scheduled_scan, DEFAULT_CONFIG)

    assert in_flight_id(nxt) != first_id
    assert nxt.in_flight is not None and nxt.in_flight.attempt == 1


# --- results ------------------------------------------------------------------------


def test_successful_scan_sets_state_interval_and_next_scan() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    completed = NOW + 5 * MINUTE
    arrived = completed + 30 * SECOND
    result = scan_succeeded(
        in_flight_id(schedule), completed_at=completed, score=85.0, scan_id="scan-42"
    )

    decision = decide(schedule, result, now=arrived, config=DEFAULT_CONFIG)

    after = decision.schedule
    assert after is not None and decision.changed
    assert after.state is ComplianceState.MOSTLY_COMPLIANT
    assert after.compliance_state is ComplianceState.MOSTLY_COMPLIANT
    assert after.score == 85.0
    assert after.current_interval_minutes == 720
    assert after.scan_priority == 4
    assert after.next_scheduled_scan == completed + timedelta(minutes=720)
    assert after.consecutive_scan_failures == 0
    assert after.last_scan_completed == completed
    assert after.last_scan_id == "scan-42"
    assert after.last_error is None
    assert after.in_flight is None
    assert decision.releases == (
        SlotReleased(command_id=result.command_id, outcome=ReleaseOutcome.COMPLETED),
    )
    assert decision.dispatch == ()
    assert wake_at(after, DEFAULT_CONFIG) == completed + timedelta(minutes=720)


@pytest.mark.parametrize(
    ("score", "critical", "high", "state", "minutes", "priority"),
    [
        (100.0, 0, 0, ComplianceState.COMPLIANT, 1440, 3),
        (60.0, 0, 0, ComplianceState.PARTIAL, 360, 6),
        (30.0, 0, 0, ComplianceState.LOW, 120, 7),
        (10.0, 0, 0, ComplianceState.CRITICAL, 60, 9),
        (100.0, 0, 1, ComplianceState.CRITICAL, 60, 9),
        (95.0, 2, 0, ComplianceState.CRITICAL, 60, 9),
    ],
)
def test_successful_scan_plans_next_scan_from_its_state(
    score: float, critical: int, high: int, state: ComplianceState, minutes: int, priority: int
) -> None:
    after = scanned(score=score, critical=critical, high=high, completed_at=NOW)

    assert after.state is state
    assert after.current_interval_minutes == minutes
    assert after.scan_priority == priority
    assert after.next_scheduled_scan == NOW + timedelta(minutes=minutes)


def test_successful_scan_clears_consecutive_failures() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    failed_at = NOW + MINUTE
    failed = decide(
        schedule,
        scan_failed(in_flight_id(schedule), completed_at=failed_at),
        now=failed_at,
        config=DEFAULT_CONFIG,
    ).schedule
    assert failed is not None and failed.consecutive_scan_failures == 1
    retry = issued(
        claimed_at(failed, failed_at + timedelta(seconds=300), DEFAULT_CONFIG),
        at=failed_at + timedelta(seconds=300),
    )

    done_at = failed_at + timedelta(minutes=10)
    after = decide(
        retry,
        scan_succeeded(in_flight_id(retry), completed_at=done_at),
        now=done_at,
        config=DEFAULT_CONFIG,
    ).schedule

    assert after is not None
    assert after.consecutive_scan_failures == 0
    assert after.last_error is None
    assert after.next_scheduled_scan == done_at + timedelta(minutes=1440)


def test_failed_scan_retries_after_retry_delay() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    failed_at = NOW + 5 * MINUTE

    decision = decide(
        schedule,
        scan_failed(in_flight_id(schedule), completed_at=failed_at, error="connection refused"),
        now=failed_at,
        config=DEFAULT_CONFIG,
    )

    after = decision.schedule
    assert after is not None
    assert after.consecutive_scan_failures == 1
    assert after.next_scheduled_scan == failed_at + timedelta(seconds=300)
    assert after.last_error == "connection refused"
    assert after.in_flight is None
    assert after.last_scan_completed is None
    assert decision.releases == (
        SlotReleased(command_id=in_flight_id(schedule), outcome=ReleaseOutcome.FAILED),
    )
    retry_at = failed_at + timedelta(seconds=300)
    early = decide(
        after, host_due(at=retry_at - SECOND), now=retry_at - SECOND, config=DEFAULT_CONFIG
    )
    on_time = decide(after, host_due(at=retry_at), now=retry_at, config=DEFAULT_CONFIG)
    assert early.dispatch == ()
    [request] = on_time.dispatch
    assert request.reason is CommandReason.RETRY
    assert request.attempt == 2


def test_failed_scan_retry_delay_follows_config() -> None:
    config = SchedulerConfig(retry_delay_seconds=45)
    schedule = issued(onboarded(at=NOW, config=config), at=NOW, config=config)
    failed_at = NOW + MINUTE

    after = decide(
        schedule,
        scan_failed(in_flight_id(schedule), completed_at=failed_at),
        now=failed_at,
        config=config,
    ).schedule

    assert after is not None
    assert after.next_scheduled_scan == failed_at + timedelta(seconds=45)


def test_repeated_failures_count_up() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    now = NOW
    for expected in (1, 2, 3):
        now += MINUTE
        failed = decide(
            schedule,
            scan_failed(in_flight_id(schedule), completed_at=now),
            now=now,
            config=DEFAULT_CONFIG,
        ).schedule
        assert failed is not None and failed.consecutive_scan_failures == expected
        now = failed.next_scheduled_scan
        schedule = issued(claimed_at(failed, now, DEFAULT_CONFIG), at=now)


def test_failed_scan_keeps_the_last_known_compliance_state() -> None:
    schedule = scanned(score=60.0, completed_at=NOW)
    due = schedule.next_scheduled_scan
    running = issued(claimed_at(schedule, due, DEFAULT_CONFIG), at=due)

    failed = decide(
        running,
        scan_failed(in_flight_id(running), completed_at=due + MINUTE),
        now=due + MINUTE,
        config=DEFAULT_CONFIG,
    ).schedule

    assert failed is not None
    assert failed.state is ComplianceState.PARTIAL
    assert failed.compliance_state is ComplianceState.PARTIAL
    assert failed.last_scan_completed == NOW


def test_failed_scan_error_is_kept_to_500_chars() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    result = scan_failed(in_flight_id(schedule), completed_at=NOW + MINUTE, error="e" * 5000)

    after = decide(schedule, result, now=NOW + MINUTE, config=DEFAULT_CONFIG).schedule

    assert after is not None and after.last_error == "e" * 500


def test_result_for_another_command_is_ignored_as_stale() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    stale = scan_succeeded(command_id(HOST, 0, 9), completed_at=NOW + MINUTE, score=10.0)

    decision = decide(schedule, stale, now=NOW + MINUTE, config=DEFAULT_CONFIG)

    assert decision.ignored == "stale_result"
    assert without_bookkeeping(decision.schedule) == without_bookkeeping(schedule)
    assert decision.dispatch == ()
    # Released again (for this host only): a no-op unless its first release was lost.
    assert decision.releases == (
        SlotReleased(command_id=stale.command_id, outcome=ReleaseOutcome.COMPLETED, host_id=HOST),
    )


def test_result_with_nothing_in_flight_is_ignored_as_stale() -> None:
    schedule = scanned(completed_at=NOW)
    stale = scan_succeeded(command_id(HOST, 1, 1), completed_at=NOW + MINUTE, score=10.0)

    decision = decide(schedule, stale, now=NOW + MINUTE, config=DEFAULT_CONFIG)

    assert decision.ignored == "stale_result"
    assert without_bookkeeping(decision.schedule) == without_bookkeeping(schedule)
    assert [r.command_id for r in decision.releases] == [stale.command_id]


def test_result_from_a_foreign_scanner_leaves_the_command_in_flight() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    result = scan_succeeded(in_flight_id(schedule), completed_at=NOW + MINUTE).model_copy(
        update={"scanner": "inventory"}
    )

    decision = decide(schedule, result, now=NOW + MINUTE, config=DEFAULT_CONFIG)

    assert decision.ignored == "foreign_scanner"
    assert in_flight_id(decision.schedule) == in_flight_id(schedule)
    assert decision.releases == ()


def test_redelivered_result_is_a_duplicate() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    result = scan_succeeded(in_flight_id(schedule), completed_at=NOW + MINUTE)
    first = decide(schedule, result, now=NOW + MINUTE, config=DEFAULT_CONFIG)

    again = decide(first.schedule, result, now=NOW + 2 * MINUTE, config=DEFAULT_CONFIG)

    assert again.ignored == "duplicate_event"
    assert again.schedule == first.schedule and not again.changed
    # The first release may never have reached the dispatcher (the worker stopped after the
    # host's state was written): it goes again, naming the host.
    assert again.releases == (
        SlotReleased(command_id=result.command_id, outcome=ReleaseOutcome.COMPLETED, host_id=HOST),
    )


def test_a_failed_result_read_again_releases_its_command_again_as_failed() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    result = scan_failed(in_flight_id(schedule), completed_at=NOW + MINUTE, error="boom")
    first = decide(schedule, result, now=NOW + MINUTE, config=DEFAULT_CONFIG)

    again = decide(first.schedule, result, now=NOW + 2 * MINUTE, config=DEFAULT_CONFIG)

    assert [(r.outcome, r.host_id) for r in again.releases] == [(ReleaseOutcome.FAILED, HOST)]


def test_a_result_read_again_while_its_command_is_still_in_flight_releases_nothing() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    foreign = scan_succeeded(in_flight_id(schedule), completed_at=NOW + MINUTE).model_copy(
        update={"scanner": "inventory"}
    )
    first = decide(schedule, foreign, now=NOW + MINUTE, config=DEFAULT_CONFIG)

    again = decide(first.schedule, foreign, now=NOW + 2 * MINUTE, config=DEFAULT_CONFIG)

    assert again.ignored == "duplicate_event" and again.releases == ()


# --- issue and timeout --------------------------------------------------------------


def test_command_issued_records_issue_time_and_deadline() -> None:
    schedule = onboarded(at=NOW)
    at = NOW + 2 * SECOND

    decision = decide(
        schedule, command_issued(in_flight_id(schedule), at=at), now=at, config=DEFAULT_CONFIG
    )

    after = decision.schedule
    assert after is not None and after.in_flight is not None and decision.changed
    assert after.in_flight.issued_at == at
    assert after.in_flight.deadline == at + timedelta(seconds=600)
    assert after.in_flight.command_id == in_flight_id(schedule)


def test_second_command_issued_is_ignored_as_duplicate() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    later = NOW + MINUTE

    decision = decide(
        schedule, command_issued(in_flight_id(schedule), at=later), now=later, config=DEFAULT_CONFIG
    )

    assert decision.ignored == "duplicate_issue"
    assert decision.schedule is not None and decision.schedule.in_flight is not None
    assert decision.schedule.in_flight.issued_at == NOW


def test_command_issued_for_another_command_is_ignored_as_stale() -> None:
    schedule = onboarded(at=NOW)

    decision = decide(
        schedule, command_issued("someone-else", at=NOW), now=NOW, config=DEFAULT_CONFIG
    )

    assert decision.ignored == "stale_issue"
    assert decision.schedule is not None and decision.schedule.in_flight is not None
    assert decision.schedule.in_flight.issued_at is None


def test_timed_out_command_retries_like_a_failure() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    deadline = NOW + timedelta(seconds=600)

    decision = decide(
        schedule,
        command_timed_out(in_flight_id(schedule), deadline=deadline),
        now=deadline,
        config=DEFAULT_CONFIG,
    )

    after = decision.schedule
    assert after is not None and decision.changed
    assert after.in_flight is None
    assert after.consecutive_scan_failures == 1
    assert after.attempt == 2
    assert after.next_scheduled_scan == deadline + timedelta(seconds=300)
    assert after.last_error is not None and "timed out" in after.last_error
    assert wake_at(after, DEFAULT_CONFIG) == deadline + timedelta(seconds=300)


def test_timeout_for_another_command_is_ignored_as_stale() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    deadline = NOW + timedelta(seconds=600)

    decision = decide(
        schedule,
        command_timed_out("old-command", deadline=deadline),
        now=deadline,
        config=DEFAULT_CONFIG,
    )

    assert decision.ignored == "stale_timeout"
    assert in_flight_id(decision.schedule) == in_flight_id(schedule)
    assert decision.schedule is not None and decision.schedule.consecutive_scan_failures == 0


# --- maintenance --------------------------------------------------------------------


def test_maintenance_with_duration_ends_after_that_many_hours() -> None:
    schedule = scanned(completed_at=NOW)
    at = NOW + MINUTE

    after = decide(
        schedule,
        maintenance_set(enabled=True, duration_hours=4, at=at),
        now=at,
        config=DEFAULT_CONFIG,
    ).schedule

    assert after is not None
    assert after.maintenance_mode is True
    assert after.maintenance_until == at + timedelta(hours=4)
    assert after.state is ComplianceState.MAINTENANCE
    assert after.compliance_state is ComplianceState.COMPLIANT


def test_maintenance_without_duration_lasts_until_cleared() -> None:
    schedule = scanned(completed_at=NOW)
    at = NOW + MINUTE
    held = decide(
        schedule, maintenance_set(enabled=True, at=at), now=at, config=DEFAULT_CONFIG
    ).schedule
    assert held is not None and held.maintenance_until is None
    assert wake_at(held, DEFAULT_CONFIG) is None

    much_later = NOW + timedelta(days=30)
    still = decide(held, host_due(at=much_later), now=much_later, config=DEFAULT_CONFIG)
    assert still.dispatch == ()
    assert still.schedule is not None and still.schedule.maintenance_mode is True

    cleared = decide(
        held, maintenance_set(enabled=False, at=much_later), now=much_later, config=DEFAULT_CONFIG
    )
    assert cleared.schedule is not None
    assert cleared.schedule.maintenance_mode is False
    assert cleared.schedule.state is ComplianceState.COMPLIANT
    [request] = cleared.dispatch  # Overdue: claimed on the input that ends maintenance.
    assert request.reason is CommandReason.SCHEDULED


def test_maintenance_ends_exactly_at_maintenance_until() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)  # Next scan NOW + 24 h.
    start = NOW + timedelta(hours=1)
    held = decide(
        schedule,
        maintenance_set(enabled=True, duration_hours=48, at=start),
        now=start,
        config=DEFAULT_CONFIG,
    ).schedule
    assert held is not None
    until = start + timedelta(hours=48)
    assert wake_at(held, DEFAULT_CONFIG) == until

    just_before = decide(
        held, host_due(at=until - SECOND), now=until - SECOND, config=DEFAULT_CONFIG
    )
    at_end = decide(held, host_due(at=until), now=until, config=DEFAULT_CONFIG)

    assert just_before.dispatch == ()
    assert just_before.schedule is not None and just_before.schedule.maintenance_mode is True
    assert at_end.schedule is not None
    assert at_end.schedule.maintenance_mode is False
    assert at_end.schedule.maintenance_until is None
    assert at_end.schedule.state is ComplianceState.COMPLIANT
    [request] = at_end.dispatch
    assert request.reason is CommandReason.SCHEDULED
    assert request.due_at == NOW + timedelta(hours=24)


def test_short_maintenance_ends_at_its_end_not_at_the_next_scan() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)  # Next scan NOW + 24 h.
    held = decide(
        schedule,
        maintenance_set(enabled=True, duration_hours=2, at=NOW),
        now=NOW,
        config=DEFAULT_CONFIG,
    ).schedule

    assert held is not None
    until = NOW + timedelta(hours=2)
    assert wake_at(held, DEFAULT_CONFIG) == until
    at_end = decide(held, host_due(at=until), now=until, config=DEFAULT_CONFIG)

    assert at_end.dispatch == ()  # Maintenance over, but the host is not due yet.
    assert at_end.changed  # The new state must be stored and shown at once.
    after = at_end.schedule
    assert after is not None and after.maintenance_mode is False
    assert after.maintenance_until is None
    assert after.state is ComplianceState.COMPLIANT
    assert after.next_scheduled_scan == NOW + timedelta(hours=24)
    assert wake_at(after, DEFAULT_CONFIG) == NOW + timedelta(hours=24)


@pytest.mark.parametrize(
    ("update", "config"),
    [
        ({"status": HostStatus.DOWN}, DEFAULT_CONFIG),
        ({"is_active": False}, DEFAULT_CONFIG),
        ({}, DEFAULT_CONFIG.model_copy(update={"enabled": False})),
    ],
    ids=["down", "inactive", "paused"],
)
def test_maintenance_ends_on_time_even_when_nothing_could_be_scanned(
    update: dict[str, object], config: SchedulerConfig
) -> None:
    schedule = scanned(score=100.0, completed_at=NOW).model_copy(update=update)
    held = decide(
        schedule, maintenance_set(enabled=True, duration_hours=2, at=NOW), now=NOW, config=config
    ).schedule
    assert held is not None
    until = NOW + timedelta(hours=2)
    assert wake_at(held, config) == until

    at_end = decide(held, host_due(at=until), now=until, config=config)

    assert at_end.changed and at_end.dispatch == ()
    assert at_end.schedule is not None and at_end.schedule.maintenance_mode is False
    assert at_end.schedule.state is ComplianceState.COMPLIANT
    assert wake_at(at_end.schedule, config) is None  # Nothing to do until an event.


def test_maintenance_ends_on_time_while_a_forced_scan_runs() -> None:
    held = decide(
        scanned(score=100.0, completed_at=NOW),
        maintenance_set(enabled=True, duration_hours=1, at=NOW),
        now=NOW,
        config=DEFAULT_CONFIG,
    ).schedule
    forced = decide(held, scan_requested(at=NOW), now=NOW, config=DEFAULT_CONFIG).schedule
    assert forced is not None and forced.in_flight is not None
    until = NOW + timedelta(hours=1)
    assert wake_at(forced, DEFAULT_CONFIG) == until

    at_end = decide(forced, host_due(at=until), now=until, config=DEFAULT_CONFIG).schedule

    assert at_end is not None and at_end.maintenance_mode is False
    assert at_end.in_flight == forced.in_flight
    assert wake_at(at_end, DEFAULT_CONFIG) is None


def test_maintenance_shows_the_maintenance_interval_and_priority() -> None:
    config = SchedulerConfig(interval_maintenance=600, priority_maintenance=2)
    schedule = scanned(score=100.0, completed_at=NOW, config=config)
    assert (schedule.current_interval_minutes, schedule.scan_priority) == (1440, 3)

    held = decide(
        schedule,
        maintenance_set(enabled=True, duration_hours=4, at=NOW),
        now=NOW,
        config=config,
    ).schedule

    assert held is not None and held.state is ComplianceState.MAINTENANCE
    assert (held.current_interval_minutes, held.scan_priority) == (600, 2)
    assert held.next_scheduled_scan == schedule.next_scheduled_scan  # The state's plan is kept.
    assert held.compliance_state is ComplianceState.COMPLIANT


def test_maintenance_defaults_are_2880_minutes_and_priority_1() -> None:
    held = decide(
        scanned(score=30.0, completed_at=NOW),
        maintenance_set(enabled=True, at=NOW),
        now=NOW,
        config=DEFAULT_CONFIG,
    ).schedule

    assert held is not None
    assert (held.current_interval_minutes, held.scan_priority) == (2880, 1)


def test_leaving_maintenance_restores_the_compliance_state_interval_and_priority() -> None:
    held = decide(
        scanned(score=30.0, completed_at=NOW),  # low: 120 min, priority 7.
        maintenance_set(enabled=True, duration_hours=1, at=NOW),
        now=NOW,
        config=DEFAULT_CONFIG,
    ).schedule
    assert held is not None
    until = NOW + timedelta(hours=1)

    expired = decide(held, host_due(at=until), now=until, config=DEFAULT_CONFIG).schedule
    cleared = decide(
        held,
        maintenance_set(enabled=False, at=NOW + MINUTE),
        now=NOW + MINUTE,
        config=DEFAULT_CONFIG,
    ).schedule

    for after in (expired, cleared):
        assert after is not None and after.state is ComplianceState.LOW
        assert (after.current_interval_minutes, after.scan_priority) == (120, 7)


def test_config_change_and_forced_result_during_maintenance_keep_maintenance_figures() -> None:
    held = decide(
        scanned(score=100.0, completed_at=NOW),
        maintenance_set(enabled=True, at=NOW),
        now=NOW,
        config=DEFAULT_CONFIG,
    ).schedule
    assert held is not None
    config = SchedulerConfig(interval_maintenance=1000, priority_maintenance=2, version=1)

    replanned = decide(held, replan(config_version=1), now=NOW + MINUTE, config=config).schedule
    assert replanned is not None
    assert (replanned.current_interval_minutes, replanned.scan_priority) == (1000, 2)

    forced = decide(replanned, scan_requested(at=NOW + MINUTE), now=NOW + MINUTE, config=config)
    command = in_flight_id(forced.schedule)
    assert forced.schedule is not None
    done = NOW + 2 * MINUTE
    result = scan_succeeded(command, completed_at=done, score=10.0)
    after = decide(forced.schedule, result, now=done, config=config).schedule

    assert after is not None and after.maintenance_mode is True
    assert after.state is ComplianceState.MAINTENANCE
    assert after.compliance_state is ComplianceState.CRITICAL
    assert (after.current_interval_minutes, after.scan_priority) == (1000, 2)


def test_due_index_wakes_host_exactly_when_maintenance_ends() -> None:
    schedule = scanned(score=30.0, completed_at=NOW)  # Next scan NOW + 2 h.
    held = decide(
        schedule,
        maintenance_set(enabled=True, duration_hours=6, at=NOW),
        now=NOW,
        config=DEFAULT_CONFIG,
    ).schedule
    assert held is not None
    index = DueIndex()
    index.set(HOST, wake_at(held, DEFAULT_CONFIG))
    until = NOW + timedelta(hours=6)

    assert index.pop_due(NOW + timedelta(hours=2)) == []
    assert index.pop_due(until - SECOND) == []
    [(host, woke)] = index.pop_due(until)

    decision = decide(held, host_due(host, at=woke), now=woke, config=DEFAULT_CONFIG)
    assert host == HOST and woke == until
    [request] = decision.dispatch
    assert request.due_at == NOW + timedelta(hours=2)
    assert len(index) == 0


def test_successful_scan_during_maintenance_keeps_maintenance_state() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)
    held = decide(
        schedule,
        maintenance_set(enabled=True, duration_hours=24, at=NOW),
        now=NOW,
        config=DEFAULT_CONFIG,
    ).schedule
    forced = decide(
        held, scan_requested(at=NOW + MINUTE), now=NOW + MINUTE, config=DEFAULT_CONFIG
    ).schedule
    running = issued(forced, at=NOW + MINUTE)
    done = NOW + 10 * MINUTE

    after = decide(
        running,
        scan_succeeded(in_flight_id(running), completed_at=done, score=40.0),
        now=done,
        config=DEFAULT_CONFIG,
    ).schedule

    assert after is not None
    assert after.state is ComplianceState.MAINTENANCE
    assert after.compliance_state is ComplianceState.LOW
    assert after.maintenance_mode is True
    assert after.last_scan_completed == done


# --- force --------------------------------------------------------------------------


def test_force_scan_is_claimed_now_with_top_priority() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)  # Not due for 24 h.
    at = NOW + timedelta(hours=1)

    decision = decide(schedule, scan_requested(at=at), now=at, config=DEFAULT_CONFIG)

    [request] = decision.dispatch
    assert request.reason is CommandReason.FORCE
    assert request.priority == 10
    assert request.due_at == at
    assert decision.schedule is not None
    assert decision.schedule.force_requested is False
    assert decision.schedule.in_flight is not None
    assert decision.schedule.in_flight.reason is CommandReason.FORCE


def test_force_scan_runs_even_in_maintenance() -> None:
    schedule = scanned(completed_at=NOW)
    held = decide(
        schedule, maintenance_set(enabled=True, at=NOW), now=NOW, config=DEFAULT_CONFIG
    ).schedule
    at = NOW + timedelta(hours=1)

    decision = decide(held, scan_requested(at=at), now=at, config=DEFAULT_CONFIG)

    [request] = decision.dispatch
    assert request.reason is CommandReason.FORCE and request.priority == 10
    assert decision.schedule is not None and decision.schedule.maintenance_mode is True


def test_force_while_command_is_issued_runs_right_after_it_completes() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    at = NOW + MINUTE

    requested = decide(schedule, scan_requested(at=at), now=at, config=DEFAULT_CONFIG)

    assert requested.dispatch == ()
    assert requested.schedule is not None and requested.schedule.force_requested is True
    assert in_flight_id(requested.schedule) == in_flight_id(schedule)

    done = NOW + 5 * MINUTE
    result = scan_succeeded(in_flight_id(schedule), completed_at=done, score=100.0)
    completed = decide(requested.schedule, result, now=done, config=DEFAULT_CONFIG)

    assert completed.releases == (
        SlotReleased(command_id=in_flight_id(schedule), outcome=ReleaseOutcome.COMPLETED),
    )
    [request] = completed.dispatch
    assert request.reason is CommandReason.FORCE and request.priority == 10
    assert request.command_id != in_flight_id(schedule)
    assert completed.schedule is not None and completed.schedule.force_requested is False
    assert completed.schedule.state is ComplianceState.COMPLIANT


def test_force_while_command_is_issued_runs_after_it_times_out() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)
    requested = decide(
        schedule, scan_requested(at=NOW + MINUTE), now=NOW + MINUTE, config=DEFAULT_CONFIG
    ).schedule
    deadline = NOW + timedelta(seconds=600)

    decision = decide(
        requested,
        command_timed_out(in_flight_id(schedule), deadline=deadline),
        now=deadline,
        config=DEFAULT_CONFIG,
    )

    [request] = decision.dispatch
    assert request.reason is CommandReason.FORCE and request.due_at == deadline
    assert request.command_id != in_flight_id(schedule)


def test_force_while_claimed_but_not_issued_re_requests_the_same_command() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)
    due = schedule.next_scheduled_scan
    claimed = claimed_at(schedule, due, DEFAULT_CONFIG)
    assert claimed.in_flight is not None and claimed.in_flight.priority == 3

    decision = decide(
        claimed, scan_requested(at=due + SECOND), now=due + SECOND, config=DEFAULT_CONFIG
    )

    [request] = decision.dispatch
    assert request.command_id == in_flight_id(claimed)
    assert request.priority == 10
    assert request.reason is CommandReason.FORCE
    assert decision.schedule is not None and decision.schedule.in_flight is not None
    assert decision.schedule.in_flight.priority == 10
    assert decision.schedule.force_requested is False


def test_force_that_came_after_the_claim_was_issued_runs_right_after_it_completes() -> None:
    """The host cannot tell a waiting claim from an issued one: it asks the dispatcher, which
    answers IssuedBeforeForce when the command had gone out at its scheduled reason."""
    claimed = onboarded(at=NOW)
    at = NOW + MINUTE
    asked = decide(claimed, scan_requested(at=at), now=at, config=DEFAULT_CONFIG).schedule
    command = in_flight_id(claimed)

    told = decide(asked, issued_before_force(command), now=at, config=DEFAULT_CONFIG)

    assert told.ignored is None and told.dispatch == ()
    assert told.schedule is not None and told.schedule.force_requested is True
    done = NOW + 5 * MINUTE
    completed = decide(
        told.schedule, scan_succeeded(command, completed_at=done), now=done, config=DEFAULT_CONFIG
    )
    [request] = completed.dispatch
    assert request.reason is CommandReason.FORCE and request.command_id != command
    assert completed.schedule is not None and completed.schedule.force_requested is False


def test_force_whose_command_ended_before_the_answer_came_runs_at_once() -> None:
    claimed = onboarded(at=NOW)
    command = in_flight_id(claimed)
    at = NOW + MINUTE
    asked = decide(claimed, scan_requested(at=at), now=at, config=DEFAULT_CONFIG).schedule
    done = at + SECOND
    result = scan_succeeded(command, completed_at=done)
    ended = decide(asked, result, now=done, config=DEFAULT_CONFIG)
    assert ended.schedule is not None and ended.schedule.in_flight is None

    told = decide(ended.schedule, issued_before_force(command), now=done, config=DEFAULT_CONFIG)

    [request] = told.dispatch
    assert request.reason is CommandReason.FORCE and request.due_at == done
    assert told.schedule is not None and told.schedule.force_requested is False


def test_answer_to_a_force_already_met_by_a_forced_command_changes_nothing() -> None:
    claimed = onboarded(at=NOW)
    command = in_flight_id(claimed)
    done = NOW + MINUTE
    ended = decide(
        claimed, scan_succeeded(command, completed_at=done), now=done, config=DEFAULT_CONFIG
    ).schedule
    forced = decide(ended, scan_requested(at=done), now=done, config=DEFAULT_CONFIG).schedule
    assert forced is not None and forced.in_flight is not None
    assert forced.in_flight.reason is CommandReason.FORCE

    told = decide(forced, issued_before_force(command), now=done, config=DEFAULT_CONFIG)

    assert told.ignored == "force_already_claimed" and told.dispatch == ()
    assert told.schedule is not None and told.schedule.force_requested is False


def test_a_force_request_names_the_incarnation_that_asked_and_a_claim_does_not() -> None:
    claimed = onboarded(at=NOW)
    [claim] = decide(None, host_created(at=NOW), now=NOW, config=DEFAULT_CONFIG).dispatch
    at = NOW + MINUTE

    [force] = decide(claimed, scan_requested(at=at), now=at, config=DEFAULT_CONFIG).dispatch

    assert force.reason is CommandReason.FORCE and force.incarnation == claimed.incarnation
    assert claim.reason is CommandReason.UNKNOWN and claim.incarnation is None


@pytest.mark.parametrize("new_host_has_a_command_in_flight", [True, False])
def test_an_answer_to_a_force_asked_by_a_deleted_incarnation_is_ignored(
    new_host_has_a_command_in_flight: bool,
) -> None:
    """A host forced, deleted and created again under the same id: the dispatcher's late
    answer to the old host's force must not force a scan of the new one."""
    claimed = onboarded(at=NOW)
    at = NOW + MINUTE
    [force] = decide(claimed, scan_requested(at=at), now=at, config=DEFAULT_CONFIG).dispatch
    again = decide(None, host_created(at=at + SECOND), now=at + SECOND, config=DEFAULT_CONFIG)
    new_host = again.schedule
    assert new_host is not None and new_host.incarnation != claimed.incarnation
    assert new_host.in_flight is not None
    done = at + 2 * SECOND
    if not new_host_has_a_command_in_flight:
        result = scan_succeeded(in_flight_id(new_host), completed_at=done)
        new_host = decide(new_host, result, now=done, config=DEFAULT_CONFIG).schedule
        assert new_host is not None and new_host.in_flight is None
    answer = issued_before_force(force.command_id, incarnation=force.incarnation)

    told = decide(new_host, answer, now=done, config=DEFAULT_CONFIG)

    assert told.ignored == "earlier_incarnation" and told.dispatch == ()
    assert told.schedule is not None and told.schedule.force_requested is False


def test_an_answer_that_names_the_host_s_own_incarnation_forces_the_scan() -> None:
    claimed = onboarded(at=NOW)
    at = NOW + MINUTE
    [force] = decide(claimed, scan_requested(at=at), now=at, config=DEFAULT_CONFIG).dispatch
    asked = decide(claimed, scan_requested(at=at), now=at, config=DEFAULT_CONFIG).schedule
    answer = issued_before_force(force.command_id, incarnation=force.incarnation)

    told = decide(asked, answer, now=at, config=DEFAULT_CONFIG)

    assert told.ignored is None
    assert told.schedule is not None and told.schedule.force_requested is True


def test_a_replayed_answer_to_a_force_is_absorbed() -> None:
    claimed = onboarded(at=NOW)
    command = in_flight_id(claimed)
    at = NOW + MINUTE
    asked = decide(claimed, scan_requested(at=at), now=at, config=DEFAULT_CONFIG).schedule
    told = decide(asked, issued_before_force(command), now=at, config=DEFAULT_CONFIG).schedule
    done = at + MINUTE
    after_forced_claim = decide(
        told, scan_succeeded(command, completed_at=done), now=done, config=DEFAULT_CONFIG
    ).schedule

    replayed = issued_before_force(command)
    again = decide(after_forced_claim, replayed, now=done, config=DEFAULT_CONFIG)

    assert again.ignored == "duplicate_event" and again.dispatch == ()


@pytest.mark.parametrize(
    "update", [{"status": HostStatus.DOWN}, {"is_active": False}], ids=["down", "inactive"]
)
def test_force_on_a_down_or_inactive_host_is_queued_at_top_priority(
    update: dict[str, object],
) -> None:
    schedule = scanned(completed_at=NOW).model_copy(update=update)
    at = NOW + MINUTE

    decision = decide(schedule, scan_requested(at=at), now=at, config=DEFAULT_CONFIG)

    assert decision.ignored is None
    [request] = decision.dispatch
    assert request.reason is CommandReason.FORCE and request.priority == 10
    assert request.due_at == at
    assert decision.schedule is not None and decision.schedule.force_requested is False


def test_failed_force_on_a_down_host_is_retried_only_once_it_is_up() -> None:
    down = scanned(completed_at=NOW).model_copy(update={"status": HostStatus.DOWN})
    at = NOW + MINUTE
    forced = decide(down, scan_requested(at=at), now=at, config=DEFAULT_CONFIG).schedule
    command = in_flight_id(forced)
    failed_at = at + MINUTE
    after = decide(
        forced, scan_failed(command, completed_at=failed_at), now=failed_at, config=DEFAULT_CONFIG
    ).schedule
    assert after is not None and after.in_flight is None
    assert wake_at(after, DEFAULT_CONFIG) is None  # Held while down: no retry, no tick.

    much_later = failed_at + timedelta(hours=1)
    held = decide(after, host_due(at=much_later), now=much_later, config=DEFAULT_CONFIG)
    assert held.dispatch == ()
    up = decide(
        after, status_changed(status=HostStatus.UP, at=much_later), now=much_later,
        config=DEFAULT_CONFIG,
    )  # fmt: skip
    [retry] = up.dispatch
    assert retry.reason is CommandReason.RETRY


def test_force_waiting_behind_a_running_command_runs_after_it_even_if_the_host_went_down() -> None:
    """A force waiting behind a running command, then the host goes down: the operator's
    request still runs once the slot is free, and the host never wakes on every tick."""
    schedule = issued(onboarded(at=NOW), at=NOW)
    forced = decide(
        schedule, scan_requested(at=NOW + MINUTE), now=NOW + MINUTE, config=DEFAULT_CONFIG
    ).schedule
    down = decide(
        forced,
        status_changed(status=HostStatus.DOWN, at=NOW + 2 * MINUTE),
        now=NOW + 2 * MINUTE,
        config=DEFAULT_CONFIG,
    ).schedule
    done = NOW + 5 * MINUTE
    decision = decide(
        down,
        scan_succeeded(in_flight_id(schedule), completed_at=done),
        now=done,
        config=DEFAULT_CONFIG,
    )
    [request] = decision.dispatch
    assert request.reason is CommandReason.FORCE
    after = decision.schedule
    assert after is not None and after.force_requested is False
    assert wake_at(after, DEFAULT_CONFIG) is None


# --- re-planning after a config change ----------------------------------------------


def test_replan_moves_next_scan_to_last_completion_plus_new_interval() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)
    shorter = SchedulerConfig(interval_compliant=60, priority_compliant=5, version=1)
    at = NOW + 30 * MINUTE

    decision = decide(schedule, replan(), now=at, config=shorter)

    after = decision.schedule
    assert after is not None
    assert after.next_scheduled_scan == NOW + timedelta(minutes=60)
    assert after.current_interval_minutes == 60
    assert after.scan_priority == 5
    assert decision.dispatch == ()


def test_replan_claims_host_whose_new_next_scan_has_passed() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)
    shorter = SchedulerConfig(interval_compliant=60, version=1)
    at = NOW + 2 * timedelta(hours=1)

    decision = decide(schedule, replan(), now=at, config=shorter)

    [request] = decision.dispatch
    assert request.reason is CommandReason.SCHEDULED
    assert request.due_at == NOW + timedelta(minutes=60)


def test_replan_with_initialize_makes_never_scanned_host_due_now() -> None:
    config = SchedulerConfig(initial_spread_seconds=3600)
    schedule = onboarded(at=NOW, config=config)
    assert schedule.in_flight is None and schedule.next_scheduled_scan > NOW + 30 * MINUTE
    at = NOW + MINUTE

    plain = decide(schedule, replan(), now=at, config=config)
    initialize = decide(schedule, replan(initialize=True), now=at, config=config)

    assert plain.dispatch == ()
    assert plain.schedule is not None
    assert plain.schedule.next_scheduled_scan == schedule.next_scheduled_scan
    [request] = initialize.dispatch
    assert request.reason is CommandReason.UNKNOWN and request.due_at == at


def test_replan_with_initialize_leaves_scanned_host_on_its_plan() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)
    at = NOW + MINUTE

    decision = decide(schedule, replan(initialize=True), now=at, config=DEFAULT_CONFIG)

    assert decision.dispatch == ()
    assert decision.schedule is not None
    assert decision.schedule.next_scheduled_scan == NOW + timedelta(minutes=1440)


def test_replan_keeps_the_retry_time_of_a_failed_scan() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)
    due = schedule.next_scheduled_scan
    running = issued(claimed_at(schedule, due, DEFAULT_CONFIG), at=due)
    failed = decide(
        running,
        scan_failed(in_flight_id(running), completed_at=due),
        now=due,
        config=DEFAULT_CONFIG,
    ).schedule
    assert failed is not None

    after = decide(
        failed, replan(), now=due + MINUTE, config=SchedulerConfig(interval_compliant=60, version=1)
    ).schedule

    assert after is not None
    assert after.next_scheduled_scan == due + timedelta(seconds=300)


def test_replan_while_in_flight_keeps_the_command() -> None:
    schedule = issued(onboarded(at=NOW), at=NOW)

    decision = decide(
        schedule,
        replan(initialize=True),
        now=NOW + MINUTE,
        config=SchedulerConfig(priority_unknown=8, version=1),
    )

    assert decision.dispatch == ()
    assert in_flight_id(decision.schedule) == in_flight_id(schedule)
    assert decision.schedule is not None and decision.schedule.scan_priority == 8


# --- wake_at ------------------------------------------------------------------------


def test_wake_at_is_none_while_a_command_is_in_flight() -> None:
    assert wake_at(onboarded(at=NOW), DEFAULT_CONFIG) is None


def test_wake_at_is_the_next_scheduled_scan_of_an_idle_host() -> None:
    schedule = scanned(score=60.0, completed_at=NOW)
    assert wake_at(schedule, DEFAULT_CONFIG) == NOW + timedelta(minutes=360)


def test_due_index_pops_hosts_due_by_now_in_time_order() -> None:
    index = DueIndex()
    index.set("late", NOW + timedelta(hours=2))
    index.set("early", NOW - timedelta(hours=1))
    index.set("now", NOW)

    assert index.pop_due(NOW) == [("early", NOW - timedelta(hours=1)), ("now", NOW)]
    assert index.next_wake() == NOW + timedelta(hours=2)
    assert len(index) == 1


def test_next_tick_comes_when_the_earliest_wake_up_falls_due_within_its_bounds() -> None:
    def tick_in(*wakes: datetime | None, to_wall=lambda seconds: seconds) -> float:
        return seconds_to_next_tick(NOW, wakes, shortest=0.05, longest=0.1, to_wall=to_wall)

    assert tick_in(NOW + timedelta(milliseconds=70), NOW + timedelta(seconds=5)) == 0.07
    assert tick_in(None, NOW + timedelta(milliseconds=70)) == 0.07
    assert tick_in(NOW + timedelta(milliseconds=10)) == 0.05  # Batched: no sooner than shortest.
    assert tick_in(NOW - timedelta(seconds=3)) == 0.05  # A backlog: as soon as allowed.
    assert tick_in(NOW + timedelta(hours=1)) == 0.1  # New hosts may fall due sooner.
    assert tick_in(None, None) == 0.1
    # A clock 600 times faster than the wall: 30 scheduler seconds are 50 ms of wall time.
    assert tick_in(NOW + timedelta(seconds=30), to_wall=lambda seconds: seconds / 600) == 0.05


def test_due_index_keeps_only_the_latest_wake_up_of_a_host() -> None:
    index = DueIndex()
    index.set(HOST, NOW)
    index.set(HOST, NOW + timedelta(hours=1))
    index.set("gone", NOW)
    index.set("gone", None)

    assert index.pop_due(NOW + MINUTE) == []
    assert index.next_wake() == NOW + timedelta(hours=1)
    assert index.pop_due(NOW + timedelta(hours=1)) == [(HOST, NOW + timedelta(hours=1))]
    assert index.next_wake() is None


def test_due_index_pops_at_most_the_limit_per_tick() -> None:
    index = DueIndex()
    for number in range(5):
        index.set(f"host-{number}", NOW - number * MINUTE)

    first = index.pop_due(NOW, limit=3)
    rest = index.pop_due(NOW, limit=3)

    assert [host for host, _ in first] == ["host-4", "host-3", "host-2"]
    assert [host for host, _ in rest] == ["host-1", "host-0"]


def test_due_index_gives_each_wake_up_back_to_the_microsecond() -> None:
    index = DueIndex()
    offset = timezone(timedelta(hours=-5))
    wakes = {
        f"host-{number}": (NOW + number * timedelta(hours=31, microseconds=7)).astimezone(offset)
        for number in range(1, 200)
    }
    for host, wake in wakes.items():
        index.set(host, wake)
    index.set("host-1", wakes["host-1"])  # The same time again: still one wake-up.

    assert index.next_wake() == wakes["host-1"]
    assert index.due_count(wakes["host-100"]) == 100
    assert dict(index.pop_due(max(wakes.values()), limit=1_000)) == wakes


def _at(minutes: int) -> datetime:
    return NOW + timedelta(minutes=minutes)


def test_version_grows_by_one_with_every_change() -> None:
    schedule = issued(onboarded(at=_at(0)), at=_at(0))
    after = decide(
        schedule,
        scan_succeeded(in_flight_id(schedule), completed_at=_at(5)),
        now=_at(5),
        config=DEFAULT_CONFIG,
    )

    assert schedule.version == 2
    assert after.schedule is not None and after.schedule.version == 3
    assert after.schedule.updated_at == _at(5)


# --- properties ---------------------------------------------------------------------

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ACTIONS = (
    "due",
    "issue",
    "succeed",
    "fail",
    "timeout",
    "force",
    "maintenance_for",
    "maintenance_on",
    "maintenance_off",
    "down",
    "up",
    "inactive",
    "active",
    "replan",
    "replan_initialize",
    "stale_result",
    "redeliver",
)

# The scan lifecycle is weighted up so that most histories complete several scans.
LIFECYCLE = ("due", "issue", "succeed", "issue", "succeed", "fail", "timeout", "issue")

steps = st.lists(
    st.tuples(
        st.sampled_from(ACTIONS + LIFECYCLE * 2),
        st.integers(0, 3 * 24 * 60),  # Minutes that pass before the input.
        st.floats(0, 100, allow_nan=False),
        st.integers(0, 2),  # Critical and high failures.
        st.integers(1, 72),  # Maintenance hours.
    ),
    min_size=4,
    max_size=40,
)

configs = st.builds(
    SchedulerConfig,
    interval_unknown=st.integers(0, 2880),
    interval_critical=st.integers(15, 2880),
    interval_low=st.integers(30, 2880),
    interval_partial=st.integers(30, 2880),
    interval_mostly_compliant=st.integers(30, 2880),
    interval_compliant=st.integers(60, 2880),
    interval_maintenance=st.integers(60, 2880),
    max_interval_minutes=st.integers(1, 2880),
    retry_delay_seconds=st.integers(0, 86_400),
    scan_timeout_seconds=st.integers(60, 3600),
)


def _input_for(
    action: tuple[str, int, float, int, int],
    schedule: HostSchedule,
    now: datetime,
    config: SchedulerConfig,
    delivered: list[HostInput],
) -> HostInput:
    """A concrete input for an abstract step, given the host's current schedule."""
    kind, _, score, severity, hours = action
    running = schedule.in_flight
    if kind == "issue" and running is not None and running.issued_at is None:
        timeout = timedelta(seconds=config.scan_timeout_seconds)
        return command_issued(running.command_id, at=now, timeout=timeout)
    if kind == "succeed" and running is not None:
        return scan_succeeded(
            running.command_id,
            completed_at=now,
            score=score,
            critical=severity,
            high=severity,
            scan_id=f"scan-{now:%s}",
        )
    if kind == "fail" and running is not None:
        return scan_failed(running.command_id, completed_at=now, error=f"failed at {now}")
    if kind == "timeout" and running is not None and running.deadline is not None:
        return command_timed_out(running.command_id, deadline=running.deadline)
    if kind == "stale_result":
        return scan_succeeded(command_id("another-host", 1, 1), completed_at=now, score=score)
    if kind == "redeliver" and delivered:
        return delivered[len(delivered) // 2]
    simple: dict[str, HostInput] = {
        "force": scan_requested(at=now),
        "maintenance_for": maintenance_set(enabled=True, duration_hours=hours, at=now),
        "maintenance_on": maintenance_set(enabled=True, at=now),
        "maintenance_off": maintenance_set(enabled=False, at=now),
        "down": status_changed(status=HostStatus.DOWN, at=now),
        "up": status_changed(status=HostStatus.UP, at=now),
        "inactive": status_changed(is_active=False, at=now),
        "active": status_changed(is_active=True, at=now),
        "replan": replan(),
        "replan_initialize": replan(initialize=True),
    }
    return simple.get(kind, host_due(at=now))


def _history(
    actions: list[tuple[str, int, float, int, int]], config: SchedulerConfig
) -> list[tuple[datetime, HostInput]]:
    """Drive one host through `actions` and return the timed inputs it received."""
    created = host_created(at=NOW)
    history: list[tuple[datetime, HostInput]] = [(NOW, created)]
    delivered: list[HostInput] = [created]
    schedule = decide(None, created, now=NOW, config=config).schedule
    now = NOW
    for action in actions:
        assert schedule is not None
        now += timedelta(minutes=action[1])
        running = schedule.in_flight
        if action[0] == "timeout" and running is not None and running.deadline is not None:
            now = max(now, running.deadline)
        event = _input_for(action, schedule, now, config, delivered)
        history.append((now, event))
        if hasattr(event, "event_id"):
            delivered.append(event)
        schedule = decide(schedule, event, now=now, config=config).schedule
    return history


def _claims(decisions: Sequence[Decision]) -> list[str]:
    """Command ids newly claimed (not re-requested) by each decision, in order."""
    claimed: list[str] = []
    before: str | None = None
    for decision in decisions:
        assert decision.schedule is not None
        after = decision.schedule.in_flight_command_id
        if after is not None and after != before:
            claimed.append(after)
        before = after
    return claimed


@PROPERTY
@given(
    config=configs,
    score=st.floats(0, 100, allow_nan=False),
    severity=st.integers(0, 3),
    delay=st.integers(0, 3600),
)
def test_next_scan_never_exceeds_max_interval_after_a_successful_scan(
    config: SchedulerConfig, score: float, severity: int, delay: int
) -> None:
    schedule = issued(onboarded(at=NOW, config=config), at=NOW, config=config)
    completed = NOW + timedelta(seconds=delay)
    result = scan_succeeded(
        in_flight_id(schedule), completed_at=completed, score=score, high=severity
    )

    after = decide(schedule, result, now=completed + SECOND, config=config).schedule

    assert after is not None and after.last_scan_completed == completed
    assert after.current_interval_minutes <= config.max_interval_minutes
    assert after.next_scheduled_scan - completed <= timedelta(minutes=config.max_interval_minutes)
    assert after.next_scheduled_scan >= completed


@PROPERTY
@given(actions=steps)
def test_48_hour_promise_holds_after_every_successful_scan(
    actions: list[tuple[str, int, float, int, int]],
) -> None:
    history = _history(actions, DEFAULT_CONFIG)
    _, decisions = fold(history, config=DEFAULT_CONFIG)

    ceiling = timedelta(minutes=DEFAULT_CONFIG.max_interval_minutes)
    for (_, event), decision in zip(history, decisions, strict=True):
        completed = [r for r in decision.releases if r.outcome is ReleaseOutcome.COMPLETED]
        if not completed or decision.ignored:  # An ignored result's release is sent again.
            continue
        assert isinstance(event, ScanCompleted) and decision.schedule is not None
        assert decision.schedule.last_scan_completed == event.completed_at
        assert decision.schedule.next_scheduled_scan - event.completed_at <= ceiling


@PROPERTY
@given(actions=steps, config=st.one_of(st.just(DEFAULT_CONFIG), configs))
def test_replaying_the_inputs_reproduces_state_and_command_ids(
    actions: list[tuple[str, int, float, int, int]], config: SchedulerConfig
) -> None:
    history = _history(actions, config)

    first, first_decisions = fold(history, config=config)
    second, second_decisions = fold(history, config=config)

    assert first == second
    assert [d.dispatch for d in first_decisions] == [d.dispatch for d in second_decisions]
    assert [d.releases for d in first_decisions] == [d.releases for d in second_decisions]
    assert [d.ignored for d in first_decisions] == [d.ignored for d in second_decisions]


@PROPERTY
@given(actions=steps, config=st.one_of(st.just(DEFAULT_CONFIG), configs))
def test_no_command_id_is_claimed_twice_for_one_host(
    actions: list[tuple[str, int, float, int, int]], config: SchedulerConfig
) -> None:
    history = _history(actions, config)
    _, decisions = fold(history, config=config)

    claimed = _claims(decisions)
    assert len(claimed) == len(set(claimed))
    for decision in decisions:
        schedule = decision.schedule
        assert schedule is not None
        if schedule.in_flight is not None:
            assert schedule.in_flight.command_id == command_id(
                HOST, schedule.due_instance, schedule.attempt, schedule.incarnation
            )
            for request in decision.dispatch:
                assert request.command_id == schedule.in_flight.command_id
        else:
            assert decision.dispatch == ()


@PROPERTY
@given(actions=steps)
def test_redelivered_inputs_change_nothing(
    actions: list[tuple[str, int, float, int, int]],
) -> None:
    history = _history(actions, DEFAULT_CONFIG)
    final, _ = fold(history, config=DEFAULT_CONFIG)
    assert final is not None
    now, last = history[-1]
    if not hasattr(last, "event_id"):
        return

    again = decide(final, last, now=now, config=DEFAULT_CONFIG)

    assert again.ignored == "duplicate_event"
    assert again.schedule == final
    assert again.dispatch == ()
    # Only a result releases anything again: its own command, named with the host.
    assert all(
        isinstance(last, ScanCompleted)
        and release.command_id == last.command_id
        and release.host_id == final.host_id
        for release in again.releases
    )


# --- one command per host and scanner, across schedules -------------------------------


def test_a_due_claim_waits_while_a_schedule_command_of_its_scanner_is_in_flight() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)
    due = schedule.next_scheduled_scan

    held = decide(schedule, host_due(at=due), now=due, config=DEFAULT_CONFIG, scanner_busy=True)

    assert held.held_busy is True
    assert held.dispatch == ()
    assert held.schedule is not None and held.schedule.in_flight is None

    later = due + MINUTE
    freed = decide(held.schedule, host_due(at=later), now=later, config=DEFAULT_CONFIG)

    [request] = freed.dispatch
    assert freed.held_busy is False
    assert request.reason is CommandReason.SCHEDULED and request.due_at == due


def test_a_forced_scan_also_waits_for_the_schedule_command_then_runs_first() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)
    at = NOW + timedelta(hours=1)

    held = decide(schedule, scan_requested(at=at), now=at, config=DEFAULT_CONFIG, scanner_busy=True)

    assert held.held_busy is True and held.dispatch == ()
    assert held.schedule is not None and held.schedule.force_requested is True

    later = at + MINUTE
    [request] = decide(held.schedule, host_due(at=later), now=later, config=DEFAULT_CONFIG).dispatch
    assert request.reason is CommandReason.FORCE and request.priority == 10


def test_a_host_not_due_is_not_held_by_a_busy_scanner() -> None:
    schedule = scanned(score=100.0, completed_at=NOW)  # Next scan a day away.
    at = NOW + MINUTE

    decision = decide(schedule, host_due(at=at), now=at, config=DEFAULT_CONFIG, scanner_busy=True)

    assert decision.held_busy is False and decision.dispatch == ()
