"""The agent SDK's and the gateway's bookkeeping: bounded dedupe, commit watermarks, and the
result message built from a command and a report."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kairos.agent.simulate import ScannerProfile, simulated_scanner
from kairos.floor.consuming import OffsetTracker, RecentIds
from schemas.agent import ScanReport, ScanResultBody, result_event_id, scan_completed
from schemas.base import CommandReason, ComplianceState
from schemas.commands import ScanCommand
from schemas.results import ScanStatus

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def test_recent_ids_flags_a_duplicate_and_forgets_the_oldest_beyond_capacity() -> None:
    seen = RecentIds(capacity=2)
    assert seen.add("a") and seen.add("b")
    assert not seen.add("a")  # A duplicate; also refreshed as the most recent.
    assert seen.add("c")  # Evicts "b", the least recently seen.
    assert "a" in seen and "c" in seen and "b" not in seen
    assert len(seen) == 2


def test_recent_ids_refuses_a_capacity_below_one() -> None:
    with pytest.raises(ValueError):
        RecentIds(capacity=0)


def test_offsets_commit_only_below_the_oldest_unanswered_record() -> None:
    offsets = OffsetTracker()
    for offset in (10, 11, 12):
        offsets.received("p0", offset)
    offsets.done("p0", 11)
    offsets.done("p0", 12)
    assert offsets.committable() == {"p0": 10}
    offsets.committed({"p0": 10})
    assert offsets.committable() == {}  # Nothing moved since.
    offsets.done("p0", 10)
    assert offsets.committable() == {"p0": 13}
    assert offsets.pending() == 0


@given(st.permutations(range(20)), st.integers(min_value=0, max_value=20))
def test_the_committed_offset_never_passes_an_unanswered_record(
    order: list[int], answered: int
) -> None:
    offsets = OffsetTracker()
    for offset in range(20):
        offsets.received("p", offset)
    done = set(order[:answered])
    for offset in done:
        offsets.done("p", offset)
    commit = offsets.committable().get("p", 0)
    assert all(offset in done for offset in range(commit))
    assert commit == 20 or commit not in done


def command(**overrides: object) -> ScanCommand:
    values: dict[str, object] = {
        "event_id": "00000000-0000-0000-0000-000000000001",
        "command_id": "cmd-1",
        "host_id": "web-1",
        "scanner": "nmap",
        "priority": 5,
        "reason": CommandReason.SCHEDULED,
        "state": ComplianceState.UNKNOWN,
        "due_at": T0,
        "issued_at": T0,
        "deadline": T0 + timedelta(minutes=10),
        "attempt": 1,
    }
    values.update(overrides)
    return ScanCommand.model_validate(values)


def test_a_report_becomes_the_result_of_its_command_with_a_stable_event_id() -> None:
    report = ScanReport(status=ScanStatus.SUCCEEDED, score=88.5, passed=9, failed=1)
    result = scan_completed(command(), report, now=T0 + timedelta(minutes=3))
    assert (result.command_id, result.host_id, result.scanner) == ("cmd-1", "web-1", "nmap")
    assert result.status is ScanStatus.SUCCEEDED and result.score == 88.5
    assert result.completed_at == T0 + timedelta(minutes=3)
    again = scan_completed(command(), ScanReport.failure("boom"), now=T0)
    assert result.event_id == again.event_id == result_event_id("cmd-1")
    assert result_event_id("cmd-2") != result.event_id


def test_a_report_that_says_when_it_completed_keeps_that_instant() -> None:
    at = T0 + timedelta(minutes=1)
    body = ScanResultBody(
        status=ScanStatus.FAILED, error="unreachable", completed_at=at, lease_id="x"
    )
    result = scan_completed(command(), body, now=T0 + timedelta(minutes=5))
    assert result.completed_at == at and result.error == "unreachable"


async def test_the_simulated_scanner_follows_its_profile() -> None:
    profile = ScannerProfile(score_mean=50, score_stddev=40, failure_rate=0.25, scan_seconds=0)
    scan = simulated_scanner(profile, random.Random(11))
    reports = [await scan(command(command_id=f"c{n}")) for n in range(400)]
    failed = [r for r in reports if r.status is ScanStatus.FAILED]
    scored = [r for r in reports if r.status is ScanStatus.SUCCEEDED]
    assert 70 <= len(failed) <= 130  # 25 % of 400.
    assert all(r.score is not None and 0 <= r.score <= 100 for r in scored)
    assert all(r.passed + r.failed == 50 for r in scored)
    # Only the worst scans carry high-severity failures (which make a host critical).
    assert all((r.severity_high_failed > 0) == (r.score < 20 and r.failed >= 3) for r in scored)
    assert {r.score == 100 for r in scored} == {True, False}  # Clipped, so 100 does occur.


def test_a_profile_refuses_impossible_rates() -> None:
    with pytest.raises(ValueError):
        ScannerProfile(failure_rate=1.5)
    with pytest.raises(ValueError):
        ScannerProfile(scan_seconds=-1)
