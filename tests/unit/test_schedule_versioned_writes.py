"""Versioned schedule writes are enforced where the state lives: a change based on a version
the schedule has moved past is refused, and so is a create of a name that exists. The API's
read model lags, so two writes based on the same version both pass it; only one may land."""

from __future__ import annotations

import uuid
from datetime import timedelta

from schemas.schedules import ScheduleDeleted, ScheduleUpserted
from streams.policy.schedules import EXISTING_SCHEDULE, STALE_WRITE, decide_schedule
from tests.unit.schedule_factories import SCHEDULE_ID, T0, created_state, schedule

LATER = T0 + timedelta(seconds=1)


def _upsert(
    state_version: int | None, incarnation: str | None = None, **fields: object
) -> ScheduleUpserted:
    return ScheduleUpserted(
        event_id=uuid.uuid4(),
        occurred_at=LATER,
        schedule_id=SCHEDULE_ID,
        schedule=schedule(**fields),
        expected_version=state_version,
        expected_incarnation=incarnation,
    )


def test_two_changes_based_on_the_same_version_exactly_one_lands() -> None:
    state = created_state(schedule())
    base = state.version

    first = decide_schedule(state, _upsert(base, description="first"), now=LATER)
    assert first.rejection is None and first.state is not None
    second = decide_schedule(first.state, _upsert(base, priority=7), now=LATER)

    assert second.rejection is not None and second.rejection.startswith(STALE_WRITE)
    assert f"version {first.state.version}" in second.rejection
    assert second.state == first.state  # the landed change is kept, nothing is merged
    assert first.state.schedule.description == "first"


def test_a_change_without_an_expected_version_applies_to_any() -> None:
    state = created_state(schedule())
    moved = decide_schedule(state, _upsert(None, description="a"), now=LATER).state
    assert moved is not None

    decision = decide_schedule(moved, _upsert(None, description="b"), now=LATER)

    assert decision.rejection is None and decision.state is not None
    assert decision.state.schedule.description == "b"


def test_a_change_for_an_earlier_incarnation_is_refused() -> None:
    state = created_state(schedule())

    decision = decide_schedule(state, _upsert(state.version, "another"), now=LATER)

    assert decision.rejection is not None and "created again" in decision.rejection


def test_a_change_for_a_schedule_deleted_since_is_refused() -> None:
    decision = decide_schedule(None, _upsert(3), now=LATER)

    assert decision.rejection is not None and decision.rejection.startswith(STALE_WRITE)
    assert decision.state is None


def test_a_create_of_a_name_that_exists_is_refused() -> None:
    state = created_state(schedule())
    create = ScheduleUpserted(
        event_id=uuid.uuid4(),
        occurred_at=LATER,
        schedule_id=SCHEDULE_ID,
        schedule=schedule(description="second create"),
        create_only=True,
    )

    decision = decide_schedule(state, create, now=LATER)

    assert decision.rejection is not None and decision.rejection.startswith(EXISTING_SCHEDULE)
    assert decision.state == state


def test_a_delete_based_on_an_older_version_is_refused_and_the_current_one_lands() -> None:
    state = created_state(schedule())
    moved = decide_schedule(state, _upsert(state.version, description="x"), now=LATER).state
    assert moved is not None

    def delete(version: int) -> ScheduleDeleted:
        return ScheduleDeleted(
            event_id=uuid.uuid4(),
            occurred_at=LATER,
            schedule_id=SCHEDULE_ID,
            expected_version=version,
        )

    stale = decide_schedule(moved, delete(state.version), now=LATER)
    assert stale.rejection is not None and stale.state == moved
    current = decide_schedule(moved, delete(moved.version), now=LATER)
    assert current.rejection is None and current.state is None and current.changed
