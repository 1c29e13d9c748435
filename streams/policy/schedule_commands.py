"""The host side's ledger of schedule commands, and how it survives a replay.

A worker writes its tables and sends its messages through one buffered producer, and commits
an input's offset only after flushing it. A worker killed before that commit leaves any part
of the input's effects on the broker, and its successor processes the input again. So each
ledger entry outlives its command's end, marked with the input that ended it. Then a replay
can tell which of its effects may be missing and send them again:

- a replayed fan-out finds its command in the ledger. If the command is in flight, the fan-out
  re-sends the dispatch request; the dispatcher drops the request if it already has it. If the
  command has ended, the fan-out sends nothing, because a request for an ended command would
  keep the host busy with a command that is never issued.
- a replayed result (the same topic, partition and offset) releases the slot and reports the
  end again. A second result for the same command, from anywhere else, is a duplicate and
  changes nothing.

A marker is dropped when the next command for the same host and scanner ends, so the ledger
holds at most one ended entry per (host, scanner) besides the commands in flight. A busy
marker whose command is no longer in flight in the ledger (ended or forgotten) is stale and
keeps nobody busy.

The schedule side counts each command's end once (`counted_once`): a worker killed after
an end report left but before its input's offset was committed reports the end again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from schemas.base import Contract, Timestamp
from schemas.internal import ReleaseOutcome


class CommandEntry(Contract):
    """What the host side remembers of one schedule command (ledger key: the command id)."""

    schedule_id: str
    occurrence: Timestamp
    attempt: int
    host_id: str
    scanner: str
    tracked: bool = True
    ended: ReleaseOutcome | None = None
    error: str | None = None
    ended_by: str | None = None


class FanOutChoice(StrEnum):
    SEND = "send"
    """New: record the command, mark the host busy for this scanner, request it."""
    RESEND = "resend"
    """A replay; the command is in flight: request it again (the dispatcher drops duplicates)."""
    ENDED = "ended"
    """A replay; the command has ended: count it as issued, send nothing."""
    BUSY = "busy"
    """Another command of this scanner is in flight on the host: skip the host."""


class EndChoice(StrEnum):
    NOT_OURS = "not_ours"
    """Not a schedule command of this host: the adaptive path's business."""
    END = "end"
    """The command's first end: mark it, free the host, release the slot and report."""
    REPLAY = "replay"
    """The input that ended it, processed again: release and report again."""
    DUPLICATE = "duplicate"
    """Another word on a command that already ended: nothing to do."""


def origin_of(topic: str, partition: int, offset: int) -> str:
    """The identity of one input record, as `ended_by` keeps it."""
    return f"{topic}/{partition}/{offset}"


COUNTED_KEPT = 16
"""Command ids whose end a schedule remembers per host: a replayed report comes soon after."""


def fan_out_choice(
    entry: CommandEntry | None, busy_with: str | None, *, busy_entry: CommandEntry | None
) -> FanOutChoice:
    """What a fan-out does for one chosen host, given its ledger entry and busy marker.

    `busy_entry` is the ledger entry of the command the busy marker names: a marker whose
    command has ended or is unknown is stale and does not make the host busy.
    """
    if entry is not None:
        return FanOutChoice.ENDED if entry.ended is not None else FanOutChoice.RESEND
    busy = busy_with is not None and busy_entry is not None and busy_entry.ended is None
    return FanOutChoice.BUSY if busy else FanOutChoice.SEND


def counted_once(recent: Sequence[str], command_id: str) -> tuple[bool, tuple[str, ...]]:
    """Whether an end report of `command_id` is new, and the ids to remember after it."""
    if command_id in recent:
        return False, tuple(recent)
    return True, (*recent, command_id)[-COUNTED_KEPT:]


def end_choice(entry: CommandEntry | None, host_id: str, origin: str) -> EndChoice:
    """What a result or a timeout for a command does, given the command's ledger entry."""
    if entry is None or entry.host_id != host_id:
        return EndChoice.NOT_OURS
    if entry.ended is None:
        return EndChoice.END
    return EndChoice.REPLAY if entry.ended_by == origin else EndChoice.DUPLICATE


def marked_ended(
    entry: CommandEntry, outcome: ReleaseOutcome, error: str | None, origin: str
) -> CommandEntry:
    """The entry marked as ended by the input at `origin`."""
    return entry.model_copy(update={"ended": outcome, "error": error, "ended_by": origin})


def busy_key(host_id: str, scanner: str) -> str:
    """Ledger key naming the command this scanner has in flight on the host."""
    return f"busy:{host_id}/{scanner}"


def last_ended_key(host_id: str, scanner: str) -> str:
    """Ledger key naming the newest ended command of this scanner on the host."""
    return f"ended:{host_id}/{scanner}"


def last_scan_key(host_id: str, scanner: str) -> str:
    """Ledger key holding when this scanner last finished a scan of the host."""
    return f"last:{host_id}/{scanner}"


def last_scan(stored: bytes | None) -> datetime | None:
    return datetime.fromisoformat(stored.decode()) if stored else None
