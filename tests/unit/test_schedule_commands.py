"""The host side's ledger of schedule commands: what a fan-out or an end does on a replay."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas.internal import ReleaseOutcome
from streams.policy.schedule_commands import (
    CommandEntry,
    EndChoice,
    FanOutChoice,
    end_choice,
    fan_out_choice,
    last_scan,
    marked_ended,
    origin_of,
)

RESULT_AT = origin_of("scan-completed", 3, 41)


def entry(**changes: object) -> CommandEntry:
    base = CommandEntry(
        schedule_id="nightly",
        occurrence=datetime(2026, 6, 1, 2, tzinfo=UTC),
        attempt=1,
        host_id="web-1",
        scanner="nmap",
    )
    return base.model_copy(update=changes)


def test_a_fresh_host_gets_the_command() -> None:
    assert fan_out_choice(None, None, busy_entry=None) is FanOutChoice.SEND


def test_a_host_busy_with_another_command_of_the_scanner_is_skipped() -> None:
    assert fan_out_choice(None, "an-older-command", busy_entry=entry()) is FanOutChoice.BUSY


def test_a_replayed_fan_out_requests_a_command_in_flight_again() -> None:
    # The first pass wrote the ledger; whether its request reached the dispatcher is unknown.
    assert fan_out_choice(entry(), "this-command", busy_entry=entry()) is FanOutChoice.RESEND
    assert fan_out_choice(entry(), None, busy_entry=None) is FanOutChoice.RESEND


def test_a_replayed_fan_out_does_not_revive_a_command_that_already_ended() -> None:
    done = marked_ended(entry(), ReleaseOutcome.COMPLETED, None, RESULT_AT)
    assert fan_out_choice(done, None, busy_entry=None) is FanOutChoice.ENDED


def test_the_first_end_of_a_command_is_applied() -> None:
    assert end_choice(entry(), "web-1", RESULT_AT) is EndChoice.END


@pytest.mark.parametrize("known", [None, entry(host_id="web-2")])
def test_an_unknown_command_or_another_hosts_is_not_a_schedule_command(
    known: CommandEntry | None,
) -> None:
    assert end_choice(known, "web-1", RESULT_AT) is EndChoice.NOT_OURS


def test_the_same_input_again_is_a_replay_and_anything_else_a_duplicate() -> None:
    done = marked_ended(entry(), ReleaseOutcome.FAILED, "refused", RESULT_AT)
    assert (done.ended, done.error, done.ended_by) == (ReleaseOutcome.FAILED, "refused", RESULT_AT)
    assert end_choice(done, "web-1", RESULT_AT) is EndChoice.REPLAY
    resent = origin_of("scan-completed", 3, 57)
    assert end_choice(done, "web-1", resent) is EndChoice.DUPLICATE
    deadline = origin_of("kairos-host-signals", 3, 41)
    assert end_choice(done, "web-1", deadline) is EndChoice.DUPLICATE


def test_ledger_entries_written_before_end_markers_existed_still_load() -> None:
    stored = (
        b'{"schedule_id": "nightly", "occurrence": "2026-06-01T02:00:00+00:00", "attempt": 1,'
        b' "host_id": "web-1", "scanner": "nmap", "tracked": true}'
    )
    loaded = CommandEntry.model_validate_json(stored)
    assert loaded == entry() and loaded.ended is None


def test_last_scan_reads_what_the_ledger_stores() -> None:
    assert last_scan(None) is None
    assert last_scan(b"2026-06-01T02:10:00+00:00") == datetime(2026, 6, 1, 2, 10, tzinfo=UTC)
