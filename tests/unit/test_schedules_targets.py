"""Target filters, target selection, command ids and dispatch requests of schedule runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.base import CommandReason, ComplianceState, HostStatus
from schemas.objects import ObjectAttributes, Operation
from schemas.schedules import RunPlan, RunReason, Schedule, Targets
from streams.policy.targets import (
    TargetSkip,
    dispatch_requests,
    matches,
    occurrence_command_id,
    occurrence_dispatch_request,
    select_targets,
)
from tests.unit.schedule_factories import HOUR, SCHEDULE_ID, T0, host, schedule

VIEW: dict[str, Any] = {
    "hostname": "web-01.prod.example",
    "ip": "10.0.3.17",
    "os": "ubuntu-24.04",
    "organization": "acme",
    "is_active": True,
    "status": "up",
    "state": "partial",
    "labels": {"env": "prod", "tier": "3"},
}


def node(raw: Any) -> Any:
    """A validated filter tree from its JSON form."""
    return Targets.model_validate({"filter": raw}).filter


def cond(field: str, op: str, value: Any = None) -> dict[str, Any]:
    return {"field": field, "op": op, "value": value}


# --- matches --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (cond("labels.env", "eq", "prod"), True),
        (cond("labels.env", "eq", "dev"), False),
        (cond("labels.env", "ne", "dev"), True),
        (cond("organization", "in", ["acme", "globex"]), True),
        (cond("organization", "not_in", ["acme"]), False),
        (cond("labels.owner", "exists", True), False),
        (cond("labels.owner", "exists", False), True),
        (cond("os", "exists"), True),
        (cond("hostname", "prefix", "web-"), True),
        (cond("hostname", "glob", "web-*.prod.*"), True),
        (cond("hostname", "glob", "db-*"), False),
        (cond("state", "lt", "mostly_compliant"), True),
        (cond("state", "gt", "partial"), False),
        (cond("ip", "lt", "10.0.3.100"), True),  # Address order, not text order.
        (cond("ip", "gt", "9.255.255.255"), True),
        (cond("labels.tier", "gt", 2), True),
        (cond("labels.tier", "eq", 3), True),
        (cond("is_active", "eq", True), True),
        (cond("status", "eq", "down"), False),
    ],
)
def test_each_operator_on_a_host_view(condition: dict[str, Any], expected: bool) -> None:
    assert matches(node(condition), VIEW) is expected


def test_missing_fields_are_unequal_to_everything() -> None:
    sparse: dict[str, Any] = {"labels": {}}
    assert not matches(node(cond("labels.env", "eq", "prod")), sparse)
    assert matches(node(cond("labels.env", "ne", "prod")), sparse)
    assert matches(node(cond("hostname", "not_in", ["a"])), sparse)
    assert not matches(node(cond("hostname", "glob", "*")), sparse)
    assert not matches(node(cond("state", "lt", "compliant")), {"state": "unknown"})


def test_all_and_any_groups_combine_conditions() -> None:
    prod_web = node(
        {
            "all": [
                cond("labels.env", "eq", "prod"),
                {"any": [cond("hostname", "prefix", "db-"), cond("os", "glob", "ubuntu-*")]},
            ]
        }
    )
    assert matches(prod_web, VIEW)
    assert not matches(prod_web, VIEW | {"os": "windows"})
    as_list = node([cond("labels.env", "eq", "prod"), cond("organization", "eq", "other")])
    assert not matches(as_list, VIEW)
    assert matches(None, VIEW)


def test_matches_reads_a_host_schedule_directly() -> None:
    web = host("h1", hostname="web-1", labels={"env": "prod"}, state=ComplianceState.CRITICAL)
    assert matches(node([cond("labels.env", "eq", "prod"), cond("state", "eq", "critical")]), web)


def test_filter_values_are_data_not_code() -> None:
    injected = node(cond("hostname", "eq", "x' OR '1'='1"))
    assert not matches(injected, VIEW)
    assert matches(injected, VIEW | {"hostname": "x' OR '1'='1"})


# --- selection ------------------------------------------------------------------------


def run_at(occurrence: datetime = T0, **fields: Any) -> RunPlan:
    return RunPlan(schedule_id=SCHEDULE_ID, occurrence=occurrence, due_at=occurrence, **fields)


def targets_schedule(**fields: Any) -> Schedule:
    return schedule({"kind": "none"}, **fields)


def test_selection_applies_filter_activity_maintenance_and_grace() -> None:
    hosts = [
        host("a", labels={"env": "prod"}),
        host("b", labels={"env": "dev"}),
        host("c", labels={"env": "prod"}, is_active=False),
        host("d", labels={"env": "prod"}, status=HostStatus.DOWN),
        host("e", labels={"env": "prod"}, maintenance_mode=True),
        host("f", labels={"env": "prod"}, maintenance_mode=True, maintenance_until=T0 - HOUR),
        host("g", labels={"env": "prod"}),
        host("h", labels={"env": "prod"}),
    ]
    sched = targets_schedule(
        targets={"filter": cond("labels.env", "eq", "prod")}, grace_period_seconds=3600
    )
    last_scan = {"g": T0 - timedelta(minutes=30), "h": T0 - timedelta(hours=2)}
    chosen, skipped = select_targets(sched, run_at(), hosts, now=T0, last_scan_by_scanner=last_scan)
    assert chosen == ("a", "f", "h")
    assert skipped == {
        "c": TargetSkip.INACTIVE,
        "d": TargetSkip.DOWN,
        "e": TargetSkip.MAINTENANCE,
        "g": TargetSkip.GRACE_PERIOD,
    }


def test_static_object_ids_narrow_the_set_and_unknown_ones_are_reported() -> None:
    sched = targets_schedule(targets={"object_ids": ["b", "zz"]})
    chosen, skipped = select_targets(
        sched, run_at(), [host("a"), host("b")], now=T0, last_scan_by_scanner={}
    )
    assert chosen == ("b",) and skipped == {"zz": TargetSkip.UNKNOWN_HOST}


def test_empty_target_set_is_an_empty_selection() -> None:
    sched = targets_schedule(targets={"filter": cond("labels.env", "eq", "nowhere")})
    selection = select_targets(sched, run_at(), [host("a")], now=T0, last_scan_by_scanner={})
    assert selection.host_ids == () and selection.skipped == {}


def test_retry_runs_only_its_hosts_and_ignores_the_grace_period() -> None:
    sched = targets_schedule(grace_period_seconds=3600)
    retry = run_at(attempt=2, host_ids=("b",))
    chosen, _ = select_targets(
        sched, retry, [host("a"), host("b")], now=T0, last_scan_by_scanner={"b": T0}
    )
    assert chosen == ("b",)


def trigger_run(object_id: str, operation: Operation, **attributes: Any) -> RunPlan:
    return run_at(
        reason=RunReason.TRIGGER,
        object_id=object_id,
        operation=operation,
        object_attributes=ObjectAttributes(**attributes),
    )


@pytest.mark.parametrize("operation", [Operation.CREATED, Operation.UPDATED])
def test_trigger_run_targets_only_its_host(operation: Operation) -> None:
    sched = targets_schedule(trigger={"run_on": "host", "operation": operation})
    hosts = [host("a"), host("b")]
    chosen, _ = select_targets(
        sched, trigger_run("b", operation), hosts, now=T0, last_scan_by_scanner={}
    )
    assert chosen == ("b",)


def test_trigger_for_a_host_not_yet_known_uses_the_event_attributes() -> None:
    sched = targets_schedule(targets={"filter": cond("labels.env", "eq", "prod")})
    run = trigger_run("new", Operation.CREATED, labels={"env": "prod"})
    assert select_targets(sched, run, [], now=T0, last_scan_by_scanner={}).host_ids == ("new",)
    dev = trigger_run("new", Operation.CREATED, labels={"env": "dev"})
    assert select_targets(sched, dev, [], now=T0, last_scan_by_scanner={}).host_ids == ()


def test_trigger_for_a_deleted_host_skips_the_activity_checks() -> None:
    sched = targets_schedule(trigger={"run_on": "host", "operation": "deleted"})
    run = trigger_run("gone", Operation.DELETED, is_active=False)
    assert select_targets(sched, run, [], now=T0, last_scan_by_scanner={}).host_ids == ("gone",)


def test_trigger_honours_grace_and_maintenance() -> None:
    sched = targets_schedule(grace_period_seconds=600)
    run = trigger_run("a", Operation.UPDATED)
    recent = {"a": T0 - timedelta(minutes=5)}
    selection = select_targets(sched, run, [host("a")], now=T0, last_scan_by_scanner=recent)
    assert selection == ((), {"a": TargetSkip.GRACE_PERIOD})
    resting = [host("a", maintenance_mode=True)]
    selection = select_targets(sched, run, resting, now=T0, last_scan_by_scanner={})
    assert selection == ((), {"a": TargetSkip.MAINTENANCE})


def test_non_host_objects_are_taken_by_id() -> None:
    sched = targets_schedule(targets={"object_type": "repository", "object_ids": ["r2", "r1"]})
    chosen, _ = select_targets(sched, run_at(), [host("a")], now=T0, last_scan_by_scanner={})
    assert chosen == ("r1", "r2")


# --- command ids and dispatch requests --------------------------------------------------


def test_command_id_is_one_per_occurrence_host_and_attempt() -> None:
    base = occurrence_command_id("s", T0, "h1")
    assert base == occurrence_command_id("s", T0.astimezone(ZoneInfo("Asia/Tokyo")), "h1")
    others = {
        occurrence_command_id("s", T0 + HOUR, "h1"),
        occurrence_command_id("s", T0, "h2"),
        occurrence_command_id("s", T0, "h1", 2),
        occurrence_command_id("t", T0, "h1"),
    }
    assert base not in others and len(others) == 4


def test_dispatch_request_carries_the_schedule() -> None:
    sched = targets_schedule(scanner="nmap", priority=8, args={"ports": [22, 443]})
    run = run_at(T0, attempt=2)
    request = occurrence_dispatch_request(sched, run, "h1", state=ComplianceState.LOW)
    assert request.command_id == occurrence_command_id(SCHEDULE_ID, T0, "h1", 2)
    assert (request.host_id, request.priority, request.due_at) == ("h1", 8, T0)
    assert (request.reason, request.attempt, request.state) == (
        CommandReason.SCHEDULE,
        2,
        ComplianceState.LOW,
    )
    assert (request.scanner, request.schedule_id, request.args) == (
        "nmap",
        SCHEDULE_ID,
        {"ports": [22, 443]},
    )
    trigger = occurrence_dispatch_request(sched, trigger_run("h1", Operation.CREATED), "h1")
    assert trigger.reason is CommandReason.TRIGGER and trigger.attempt == 1


@settings(max_examples=50, deadline=None)
@given(
    occurrences=st.lists(
        st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1)),
        min_size=1,
        max_size=5,
        unique=True,
    ),
    host_ids=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=6, unique=True),
)
def test_every_occurrence_host_pair_gets_its_own_stable_id(
    occurrences: list[datetime], host_ids: list[str]
) -> None:
    sched = targets_schedule()
    ids: list[str] = []
    for naive in occurrences:
        run = run_at(naive.replace(tzinfo=UTC))
        requests = dispatch_requests(sched, run, host_ids)
        again = dispatch_requests(sched, run, host_ids)
        assert [r.command_id for r in requests] == [r.command_id for r in again]
        ids.extend(r.command_id for r in requests)
    assert len(ids) == len(set(ids)) == len(occurrences) * len(host_ids)
