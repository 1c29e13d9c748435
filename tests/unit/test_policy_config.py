"""Changes to the global scheduler configuration: applied whole, versioned, or refused."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas.api import ConfigUpdate
from schemas.base import ComplianceState
from schemas.changes import ConfigUpdated, SchedulerToggled
from schemas.commands import Rejection
from schemas.config import ConfigChanges, SchedulerConfig
from streams.policy.compliance import interval_minutes
from streams.policy.config import apply_config_change
from tests.unit.factories import DEFAULT_CONFIG, NOW


def config_updated(changes: ConfigChanges) -> ConfigUpdated:
    return ConfigUpdated(event_id=uuid.uuid4(), occurred_at=NOW, actor="alice", changes=changes)


def toggled(enabled: bool) -> SchedulerToggled:
    return SchedulerToggled(event_id=uuid.uuid4(), occurred_at=NOW, enabled=enabled)


def test_config_update_applies_its_changes_and_bumps_the_version() -> None:
    change = config_updated(ConfigChanges(interval_critical=30, priority_low=8))

    result = apply_config_change(DEFAULT_CONFIG, change)

    assert isinstance(result, SchedulerConfig)
    assert result.interval_critical == 30
    assert result.priority_low == 8
    assert result.version == DEFAULT_CONFIG.version + 1
    unchanged = {"interval_critical", "priority_low", "version"}
    assert result.model_dump(exclude=unchanged) == DEFAULT_CONFIG.model_dump(exclude=unchanged)
    assert DEFAULT_CONFIG.interval_critical == 60  # The input config is left as it was.


def test_every_accepted_change_bumps_the_version_by_one() -> None:
    config = SchedulerConfig(version=7)
    changes = [
        config_updated(ConfigChanges(retry_delay_seconds=120)),
        toggled(False),
        config_updated(ConfigChanges(max_concurrent_scans=50)),
        toggled(True),
    ]

    versions = []
    for change in changes:
        result = apply_config_change(config, change)
        assert isinstance(result, SchedulerConfig)
        config = result
        versions.append(config.version)

    assert versions == [8, 9, 10, 11]
    assert config.retry_delay_seconds == 120 and config.max_concurrent_scans == 50


def test_config_update_may_pause_and_resume_as_a_toggle_does() -> None:
    paused = apply_config_change(
        DEFAULT_CONFIG, config_updated(ConfigChanges(enabled=False, interval_low=90))
    )
    assert isinstance(paused, SchedulerConfig)
    assert paused.enabled is False and paused.interval_low == 90

    resumed = apply_config_change(paused, config_updated(ConfigChanges(enabled=True)))
    assert isinstance(resumed, SchedulerConfig)
    assert resumed.enabled is True and resumed.version == paused.version + 1
    assert resumed == apply_config_change(paused, toggled(True))


def test_put_config_body_takes_enabled_only_as_a_json_boolean() -> None:
    assert ConfigUpdate.model_validate({"enabled": False}).model_dump(exclude_unset=True) == {
        "enabled": False
    }
    for wrong in ("false", 0, None):
        with pytest.raises(ValidationError):
            ConfigUpdate.model_validate({"enabled": wrong})


def test_config_update_without_changes_is_rejected() -> None:
    result = apply_config_change(DEFAULT_CONFIG, config_updated(ConfigChanges()))

    assert isinstance(result, Rejection)
    assert "no changes" in result.reason


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("interval_unknown", -1),
        ("interval_critical", 14),
        ("interval_low", 29),
        ("interval_compliant", 2881),
        ("interval_maintenance", 59),
        ("priority_low", 0),
        ("priority_critical", 11),
        ("max_interval_minutes", 0),
        ("max_interval_minutes", 2881),
        ("max_concurrent_scans", 0),
        ("scan_timeout_seconds", 59),
        ("scan_timeout_seconds", 3601),
        ("retry_delay_seconds", -1),
        ("initial_spread_seconds", 86_401),
    ],
)
def test_out_of_range_change_is_refused_naming_the_field(field: str, value: int) -> None:
    with pytest.raises(ValidationError) as caught:
        ConfigChanges.model_validate({field: value})

    assert [error["loc"] for error in caught.value.errors()] == [(field,)]
    assert field in str(caught.value)


def test_out_of_range_change_is_rejected_whole() -> None:
    # ConfigChanges refuses this at construction; a change built without validation must
    # still not get past the policy, nor half of it.
    change = config_updated(ConfigChanges.model_construct(interval_critical=5, priority_low=8))

    result = apply_config_change(DEFAULT_CONFIG, change)

    assert isinstance(result, Rejection)
    assert "interval_critical" in result.reason


def test_scheduler_toggle_flips_enabled_and_keeps_the_rest() -> None:
    paused = apply_config_change(DEFAULT_CONFIG, toggled(False))
    assert isinstance(paused, SchedulerConfig)
    resumed = apply_config_change(paused, toggled(True))
    assert isinstance(resumed, SchedulerConfig)

    assert paused.enabled is False and paused.version == 1
    assert resumed.enabled is True and resumed.version == 2
    assert resumed.model_dump(exclude={"version"}) == DEFAULT_CONFIG.model_dump(exclude={"version"})


# --- properties ---------------------------------------------------------------------

changes = st.fixed_dictionaries(
    {},
    optional={
        "interval_unknown": st.integers(0, 2880),
        "interval_critical": st.integers(15, 2880),
        "interval_low": st.integers(30, 2880),
        "interval_partial": st.integers(30, 2880),
        "interval_mostly_compliant": st.integers(30, 2880),
        "interval_compliant": st.integers(60, 2880),
        "interval_maintenance": st.integers(60, 2880),
        "priority_critical": st.integers(1, 10),
        "priority_compliant": st.integers(1, 10),
        "max_interval_minutes": st.integers(1, 2880),
        "max_concurrent_scans": st.integers(1, 100_000),
        "scan_timeout_seconds": st.integers(60, 3600),
        "retry_delay_seconds": st.integers(0, 86_400),
        "initial_spread_seconds": st.integers(0, 86_400),
        "priority_aging_minutes": st.integers(0, 10_080),
    },
).filter(bool)


@settings(max_examples=150, deadline=None)
@given(values=changes, version=st.integers(0, 10_000))
def test_valid_change_is_applied_whole_and_intervals_stay_under_the_ceiling(
    values: dict[str, int], version: int
) -> None:
    config = SchedulerConfig(version=version)

    result = apply_config_change(config, config_updated(ConfigChanges(**values)))

    assert isinstance(result, SchedulerConfig)
    assert result.version == version + 1
    for field, value in values.items():
        assert getattr(result, field) == value
    untouched = set(values) | {"version"}
    assert result.model_dump(exclude=untouched) == config.model_dump(exclude=untouched)
    for state in ComplianceState:
        assert interval_minutes(state, result) <= result.max_interval_minutes
