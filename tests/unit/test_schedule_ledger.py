"""The host side's schedule-command ledger rules (`streams.policy.schedule_ledger`), pure."""

from __future__ import annotations

from datetime import timedelta

from schemas.base import CommandReason
from schemas.commands import ADAPTIVE_SCANNER
from schemas.internal import ReleaseOutcome
from schemas.schedules import RunOutcome, RunPlan, RunReason
from schemas.state import HostSchedule, InFlightCommand
from streams.policy.schedule_commands import CommandEntry, FanOutChoice
from streams.policy.schedule_ledger import (
    adaptive_busy,
    claim,
    concluded_besides,
    end_report,
    ended,
    holds_scanner,
    last_scans,
    records_last_scan,
    skip_reason,
    slot_release,
)
from streams.policy.schedules import ConcludedRun
from tests.unit.schedule_factories import HOUR, MINUTE, T0, host

ORIGIN = "kairos-scan-completed/0/7"


def run(*, attempt: int = 1, reason: RunReason = RunReason.SCHEDULE) -> RunPlan:
    return RunPlan(schedule_id="s", occurrence=T0, due_at=T0, attempt=attempt, reason=reason)


def entry(
    *, scanner: str = "nmap", tracked: bool = True, ended_by: str | None = None
) -> CommandEntry:
    return CommandEntry(
        schedule_id="s",
        occurrence=T0,
        attempt=1,
        host_id="h1",
        scanner=scanner,
        tracked=tracked,
        ended=ReleaseOutcome.COMPLETED if ended_by else None,
        ended_by=ended_by,
    )


def busy_host(host_id: str) -> HostSchedule:
    in_flight = InFlightCommand(
        command_id="adaptive-1",
        reason=CommandReason.SCHEDULED,
        priority=1,
        due_at=T0,
        attempt=1,
        claimed_at=T0,
    )
    return host(host_id).model_copy(update={"in_flight": in_flight})


def test_last_scans_prefer_the_ledger_and_count_a_hosts_own_scan_only_for_adaptive() -> None:
    scanned = host("h1").model_copy(update={"last_scan_completed": T0 - HOUR})
    other = host("h2").model_copy(update={"last_scan_completed": T0 - HOUR})
    recorded = {"h1": None, "h2": T0 - MINUTE}

    assert last_scans("nmap", [scanned, other], recorded) == {"h2": T0 - MINUTE}
    assert last_scans(ADAPTIVE_SCANNER, [scanned, other], recorded) == {
        "h1": T0 - HOUR,
        "h2": T0 - MINUTE,
    }


def test_only_the_adaptive_scanner_is_kept_busy_by_a_hosts_command_in_flight() -> None:
    hosts = [busy_host("h1"), host("h2")]

    assert adaptive_busy(ADAPTIVE_SCANNER, hosts) == {"h1"}
    assert adaptive_busy("nmap", hosts) == frozenset()


def test_a_new_claim_records_its_command_and_requests_it() -> None:
    made = claim(
        "s", run(attempt=2), "h1", "nmap", entry=None, busy_with=None, busy_entry=None,
        adaptive_busy=False,
    )  # fmt: skip

    assert made.choice is FanOutChoice.SEND
    assert made.issued and made.requested
    assert made.record == CommandEntry(
        schedule_id="s", occurrence=T0, attempt=2, host_id="h1", scanner="nmap", tracked=True
    )


def test_a_trigger_runs_command_is_recorded_untracked() -> None:
    made = claim(
        "s", run(reason=RunReason.TRIGGER), "h1", "nmap", entry=None, busy_with=None,
        busy_entry=None, adaptive_busy=False,
    )  # fmt: skip

    assert made.record is not None and not made.record.tracked


def test_the_adaptive_path_makes_a_new_claim_busy_but_not_a_replayed_one() -> None:
    new = claim(
        "s", run(), "h1", ADAPTIVE_SCANNER, entry=None, busy_with=None, busy_entry=None,
        adaptive_busy=True,
    )  # fmt: skip
    replayed = claim(
        "s", run(), "h1", ADAPTIVE_SCANNER, entry=entry(scanner=ADAPTIVE_SCANNER),
        busy_with="c1", busy_entry=entry(scanner=ADAPTIVE_SCANNER), adaptive_busy=True,
    )  # fmt: skip

    assert (new.choice, new.issued, new.record) == (FanOutChoice.BUSY, False, None)
    assert replayed.choice is FanOutChoice.RESEND
    assert replayed.issued and replayed.requested and replayed.record is None


def test_a_replayed_claim_of_an_ended_command_counts_as_issued_and_sends_nothing() -> None:
    made = claim(
        "s", run(), "h1", "nmap", entry=entry(ended_by=ORIGIN), busy_with=None, busy_entry=None,
        adaptive_busy=False,
    )  # fmt: skip

    assert made.choice is FanOutChoice.ENDED
    assert made.issued and not made.requested


def test_a_busy_marker_holds_the_scanner_only_while_its_command_is_in_flight() -> None:
    assert holds_scanner("c1", entry())
    assert not holds_scanner("c1", entry(ended_by=ORIGIN))
    assert not holds_scanner("c1", None)
    assert not holds_scanner(None, None)
    busy = claim(
        "s", run(), "h1", "nmap", entry=None, busy_with="c1", busy_entry=entry(),
        adaptive_busy=False,
    )  # fmt: skip
    assert busy.choice is FanOutChoice.BUSY


def test_an_end_marks_the_entry_frees_its_busy_marker_and_forgets_the_previous_end() -> None:
    end = ended(
        "c2", entry(), ReleaseOutcome.FAILED, "boom", ORIGIN, busy_with="c2", last_ended="c1"
    )

    assert (end.entry.ended, end.entry.error, end.entry.ended_by) == (
        ReleaseOutcome.FAILED,
        "boom",
        ORIGIN,
    )
    assert end.free_busy and not end.wake_host
    assert end.forget == "c1"


def test_an_end_leaves_another_commands_busy_marker_and_keeps_itself() -> None:
    end = ended(
        "c2", entry(), ReleaseOutcome.COMPLETED, None, ORIGIN, busy_with="c3", last_ended="c2"
    )

    assert not end.free_busy and not end.wake_host
    assert end.forget is None


def test_an_adaptive_end_that_frees_the_scanner_wakes_the_host() -> None:
    adaptive = entry(scanner=ADAPTIVE_SCANNER)
    freed = ended(
        "c1", adaptive, ReleaseOutcome.COMPLETED, None, ORIGIN, busy_with="c1", last_ended=None
    )
    not_freed = ended(
        "c1", adaptive, ReleaseOutcome.COMPLETED, None, ORIGIN, busy_with=None, last_ended=None
    )

    assert freed.wake_host and freed.forget is None
    assert not not_freed.wake_host


def test_an_ended_command_releases_its_slot_unless_it_timed_out() -> None:
    done = entry(ended_by=ORIGIN)
    timed_out = done.model_copy(update={"ended": ReleaseOutcome.TIMED_OUT})

    release = slot_release("c1", done)
    assert release is not None
    assert (release.command_id, release.outcome) == ("c1", ReleaseOutcome.COMPLETED)
    assert slot_release("c1", timed_out) is None
    assert slot_release("c1", entry()) is None


def test_only_a_tracked_runs_command_reports_its_end() -> None:
    report = end_report("c1", entry(ended_by=ORIGIN))

    assert report is not None
    assert (report.schedule_id, report.command_id, report.host_id) == ("s", "c1", "h1")
    assert (report.occurrence, report.attempt, report.outcome) == (
        T0,
        1,
        ReleaseOutcome.COMPLETED,
    )
    assert end_report("c1", entry(tracked=False, ended_by=ORIGIN)) is None
    assert end_report("c1", entry()) is None


def test_the_last_scan_is_recorded_by_the_successful_input_that_ended_the_command() -> None:
    done = entry(ended_by=ORIGIN)

    assert records_last_scan(done, ORIGIN, succeeded=True)
    assert not records_last_scan(done, ORIGIN, succeeded=False)
    assert not records_last_scan(done, "kairos-scan-completed/1/3", succeeded=True)


def concluded(occurrence_offset: timedelta, attempt: int) -> ConcludedRun:
    return ConcludedRun(
        occurrence=T0 + occurrence_offset,
        attempt=attempt,
        outcome=RunOutcome.SUCCEEDED,
        started_at=T0,
        manual=False,
        backfill=False,
        commands=1,
        failed=0,
        error=None,
    )


def test_a_dispatch_records_the_runs_it_concluded_besides_the_run_itself() -> None:
    itself, retry, earlier = (
        concluded(timedelta(0), 1),
        concluded(timedelta(0), 2),
        concluded(-HOUR, 1),
    )

    assert concluded_besides([itself, retry, earlier], run()) == [retry, earlier]


def test_skip_reason_names_the_one_reason_or_lists_them() -> None:
    assert skip_reason({}) == "no_host_matched"
    assert skip_reason({"busy": 3}) == "all_busy"
    assert skip_reason({"maintenance": 1, "busy": 2}) == "all_skipped:busy,maintenance"
