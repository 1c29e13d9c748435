"""A claim that waits for a slot is withdrawn when its host leaves the scannable set
(maintenance, down, inactive), and the host claims again, under a new command id, once it is
scannable and due. A forced claim is kept; a claim already issued runs to its end."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from schemas.base import CommandReason, HostStatus, WithdrawReason
from schemas.internal import ClaimWithdrawn, CommandWithdrawn
from schemas.state import HostSchedule
from streams.policy.host import decide, withdrawal_pending
from streams.policy.ids import message_id
from tests.unit.factories import (
    DEFAULT_CONFIG,
    HOST,
    NOW,
    issued,
    maintenance_set,
    onboarded,
    scan_requested,
    scan_succeeded,
    status_changed,
)

LATER = NOW + timedelta(seconds=5)


def _withdrawn(schedule: HostSchedule, reason: WithdrawReason) -> CommandWithdrawn:
    assert schedule.in_flight is not None
    command = schedule.in_flight.command_id
    return CommandWithdrawn(
        event_id=message_id("command-withdrawn", command),
        host_id=schedule.host_id,
        command_id=command,
        reason=reason,
    )


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (maintenance_set(enabled=True, at=LATER), WithdrawReason.MAINTENANCE),
        (status_changed(status=HostStatus.DOWN, at=LATER), WithdrawReason.DOWN),
        (status_changed(is_active=False, at=LATER), WithdrawReason.INACTIVE),
    ],
)
def test_leaving_the_scannable_set_asks_to_withdraw_a_waiting_claim(
    event: object, reason: WithdrawReason
) -> None:
    claimed = onboarded(at=NOW)
    assert claimed.in_flight is not None

    decision = decide(claimed, event, now=LATER, config=DEFAULT_CONFIG)  # type: ignore[arg-type]

    assert decision.withdrawals == (
        ClaimWithdrawn(command_id=claimed.in_flight.command_id, host_id=HOST, reason=reason),
    )
    assert decision.schedule is not None and decision.schedule.in_flight is not None
    assert decision.schedule.in_flight.withdrawing is reason
    assert decision.releases == ()


def test_the_withdrawal_is_asked_once() -> None:
    asked = decide(
        onboarded(at=NOW), maintenance_set(enabled=True, at=LATER), now=LATER, config=DEFAULT_CONFIG
    ).schedule
    assert asked is not None

    again = decide(
        asked, status_changed(status=HostStatus.DOWN, at=LATER), now=LATER, config=DEFAULT_CONFIG
    )

    assert again.withdrawals == ()


def test_the_answer_frees_the_host_and_records_the_withdrawal() -> None:
    asked = decide(
        onboarded(at=NOW), maintenance_set(enabled=True, at=LATER), now=LATER, config=DEFAULT_CONFIG
    ).schedule
    assert asked is not None and asked.in_flight is not None
    answer_at = LATER + timedelta(seconds=1)

    decision = decide(
        asked, _withdrawn(asked, WithdrawReason.MAINTENANCE), now=answer_at, config=DEFAULT_CONFIG
    )

    after = decision.schedule
    assert after is not None
    assert after.in_flight is None and decision.dispatch == ()  # still in maintenance
    assert after.withdrawals == 1
    assert after.last_withdrawn is not None
    assert after.last_withdrawn.command_id == asked.in_flight.command_id
    assert after.last_withdrawn.reason is WithdrawReason.MAINTENANCE
    assert after.last_withdrawn.at == answer_at == after.updated_at


def test_leaving_maintenance_claims_again_at_once_under_a_new_command_id() -> None:
    claimed = onboarded(at=NOW)
    assert claimed.in_flight is not None
    asked = decide(
        claimed, maintenance_set(enabled=True, at=LATER), now=LATER, config=DEFAULT_CONFIG
    ).schedule
    assert asked is not None
    freed = decide(
        asked, _withdrawn(asked, WithdrawReason.MAINTENANCE), now=LATER, config=DEFAULT_CONFIG
    ).schedule
    assert freed is not None
    ends = LATER + timedelta(minutes=10)

    decision = decide(
        freed, maintenance_set(enabled=False, at=ends), now=ends, config=DEFAULT_CONFIG
    )

    assert [request.command_id for request in decision.dispatch] != [claimed.in_flight.command_id]
    assert len(decision.dispatch) == 1
    assert decision.schedule is not None and decision.schedule.in_flight is not None
    assert decision.schedule.in_flight.command_id == decision.dispatch[0].command_id


def test_coming_back_up_before_the_answer_claims_again_once_it_comes() -> None:
    asked = decide(
        onboarded(at=NOW),
        status_changed(status=HostStatus.DOWN, at=LATER),
        now=LATER,
        config=DEFAULT_CONFIG,
    ).schedule
    assert asked is not None
    up = decide(
        asked, status_changed(status=HostStatus.UP, at=LATER), now=LATER, config=DEFAULT_CONFIG
    )
    assert up.dispatch == ()  # the claim is still the host's until the dispatcher answers
    assert up.schedule is not None

    answered = decide(
        up.schedule, _withdrawn(asked, WithdrawReason.DOWN), now=LATER, config=DEFAULT_CONFIG
    )

    assert len(answered.dispatch) == 1
    assert answered.dispatch[0].reason is CommandReason.UNKNOWN


def test_a_forced_claim_is_not_withdrawn() -> None:
    claimed = onboarded(at=NOW)
    forced = decide(claimed, scan_requested(at=NOW), now=NOW, config=DEFAULT_CONFIG).schedule
    assert forced is not None and forced.in_flight is not None
    assert forced.in_flight.reason is CommandReason.FORCE

    decision = decide(
        forced, maintenance_set(enabled=True, at=LATER), now=LATER, config=DEFAULT_CONFIG
    )

    assert decision.withdrawals == ()


def test_a_claim_stored_as_issued_is_not_withdrawn() -> None:
    out = issued(onboarded(at=NOW), at=NOW)

    decision = decide(
        out, maintenance_set(enabled=True, at=LATER), now=LATER, config=DEFAULT_CONFIG
    )

    assert decision.withdrawals == ()


def test_a_result_ends_a_claim_whose_withdrawal_came_too_late() -> None:
    """The dispatcher had issued it: no answer comes, the result applies as usual."""
    claimed = onboarded(at=NOW)
    assert claimed.in_flight is not None
    asked = decide(
        claimed, maintenance_set(enabled=True, at=LATER), now=LATER, config=DEFAULT_CONFIG
    ).schedule
    assert asked is not None

    done = decide(
        asked,
        scan_succeeded(claimed.in_flight.command_id, completed_at=LATER),
        now=LATER,
        config=DEFAULT_CONFIG,
    )

    assert done.schedule is not None and done.schedule.in_flight is None
    assert done.schedule.last_scan_completed == LATER
    assert done.schedule.withdrawals == 0


def test_an_answer_for_another_command_changes_nothing() -> None:
    claimed = onboarded(at=NOW)
    stale = CommandWithdrawn(
        event_id=uuid.uuid4(), host_id=HOST, command_id="other", reason=WithdrawReason.DOWN
    )

    decision = decide(claimed, stale, now=LATER, config=DEFAULT_CONFIG)

    assert decision.ignored == "stale_withdrawal"
    assert decision.schedule is not None and decision.schedule.in_flight == claimed.in_flight


def test_recovery_asks_again_for_a_withdrawal_without_an_answer() -> None:
    asked = decide(
        onboarded(at=NOW), maintenance_set(enabled=True, at=LATER), now=LATER, config=DEFAULT_CONFIG
    ).schedule
    assert asked is not None and asked.in_flight is not None

    assert withdrawal_pending(asked) == ClaimWithdrawn(
        command_id=asked.in_flight.command_id, host_id=HOST, reason=WithdrawReason.MAINTENANCE
    )
    assert withdrawal_pending(onboarded(at=NOW)) is None
