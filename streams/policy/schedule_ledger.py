"""The rules of the host side's schedule-command ledger, over typed data (see `schedule_commands`).

The schedule stage reads the ledger (`CommandEntry` values and the `busy:`, `ended:` and
`last:` markers), calls these functions and writes what they return: a claim for each host
a fan-out selected, the bookkeeping of a command's end, and the messages that end sends.
Nothing here reads a table, a clock or Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from schemas.commands import ADAPTIVE_SCANNER
from schemas.internal import ReleaseOutcome, ScheduleCommandEnded, SlotReleased
from schemas.schedules import RunPlan
from schemas.state import HostSchedule
from streams.policy.schedule_commands import (
    CommandEntry,
    FanOutChoice,
    fan_out_choice,
    marked_ended,
)
from streams.policy.schedules import ConcludedRun


def last_scans(
    scanner: str, hosts: Iterable[HostSchedule], recorded: Mapping[str, datetime | None]
) -> dict[str, datetime]:
    """When `scanner` last finished a scan of each host, for target selection.

    The ledger's `last:` marker (`recorded`, by host id) is the schedule commands' own word;
    for the adaptive scanner a host's own last completed scan counts where the ledger has none,
    since the adaptive path runs that scanner too."""
    merged: dict[str, datetime] = {}
    for host in hosts:
        if scanner == ADAPTIVE_SCANNER and host.last_scan_completed:
            merged[host.host_id] = host.last_scan_completed
        stored = recorded.get(host.host_id)
        if stored is not None:
            merged[host.host_id] = stored
    return merged


def adaptive_busy(scanner: str, hosts: Iterable[HostSchedule]) -> frozenset[str]:
    """The hosts a schedule of `scanner` finds busy whatever its ledger says: the adaptive
    schedule's command in flight occupies the adaptive scanner too."""
    if scanner != ADAPTIVE_SCANNER:
        return frozenset()
    return frozenset(host.host_id for host in hosts if host.in_flight is not None)


@dataclass(frozen=True)
class Claim:
    """What a fan-out does for one selected host."""

    choice: FanOutChoice
    record: CommandEntry | None = None
    """A new ledger entry to write under the command id (only when the choice is SEND)."""

    @property
    def issued(self) -> bool:
        """The host counts as issued (a replay of an ended command too); BUSY: skipped."""
        return self.choice is not FanOutChoice.BUSY

    @property
    def requested(self) -> bool:
        """The host is marked busy with the command and its dispatch request is sent."""
        return self.choice in (FanOutChoice.SEND, FanOutChoice.RESEND)


def claim(
    schedule_id: str,
    run: RunPlan,
    host_id: str,
    scanner: str,
    *,
    entry: CommandEntry | None,
    busy_with: str | None,
    busy_entry: CommandEntry | None,
    adaptive_busy: bool,
) -> Claim:
    """The claim of a fan-out on one host, given the command's ledger entry (`entry`), the
    scanner's busy marker (`busy_with`, with its command's entry) and whether the adaptive
    path keeps the host busy (`adaptive_busy`, which a replay of a known command ignores)."""
    choice = fan_out_choice(entry, busy_with, busy_entry=busy_entry)
    if entry is None and adaptive_busy:
        choice = FanOutChoice.BUSY
    if choice is not FanOutChoice.SEND:
        return Claim(choice)
    record = CommandEntry(
        schedule_id=schedule_id,
        occurrence=run.occurrence,
        attempt=run.attempt,
        host_id=host_id,
        scanner=scanner,
        tracked=run.tracked,
    )
    return Claim(choice, record)


def holds_scanner(busy_with: str | None, busy_entry: CommandEntry | None) -> bool:
    """A busy marker keeps the host busy: the command it names is in flight in the ledger."""
    if busy_with is None:
        return False
    return fan_out_choice(None, busy_with, busy_entry=busy_entry) is FanOutChoice.BUSY


@dataclass(frozen=True)
class LedgerEnd:
    """The ledger's bookkeeping for a command's first end."""

    entry: CommandEntry
    """The command's entry, marked ended: written under its command id."""
    free_busy: bool
    """The busy marker names this command: delete it."""
    wake_host: bool
    """The host's adaptive claim may be waiting for the scanner this end frees."""
    forget: str | None
    """The previous newest ended command of this host and scanner: its entry is deleted."""


def ended(
    command_id: str,
    entry: CommandEntry,
    outcome: ReleaseOutcome,
    error: str | None,
    origin: str,
    *,
    busy_with: str | None,
    last_ended: str | None,
) -> LedgerEnd:
    """Mark a command ended by the input at `origin`; the `ended:` marker then names it.

    `busy_with` is the host and scanner's busy marker, `last_ended` their `ended:` marker."""
    free_busy = busy_with == command_id
    return LedgerEnd(
        entry=marked_ended(entry, outcome, error, origin),
        free_busy=free_busy,
        wake_host=free_busy and entry.scanner == ADAPTIVE_SCANNER,
        forget=last_ended if last_ended is not None and last_ended != command_id else None,
    )


def slot_release(command_id: str, entry: CommandEntry) -> SlotReleased | None:
    """The dispatcher's slot released by an ended command; None: a timeout (the dispatcher
    freed that slot itself) or a command not ended."""
    if entry.ended is None or entry.ended is ReleaseOutcome.TIMED_OUT:
        return None
    return SlotReleased(command_id=command_id, outcome=entry.ended)


def end_report(command_id: str, entry: CommandEntry) -> ScheduleCommandEnded | None:
    """What the schedule side hears of an ended command; None: its run is not tracked."""
    if not entry.tracked or entry.ended is None:
        return None
    return ScheduleCommandEnded(
        schedule_id=entry.schedule_id,
        occurrence=entry.occurrence,
        attempt=entry.attempt,
        command_id=command_id,
        host_id=entry.host_id,
        outcome=entry.ended,
        error=entry.error,
    )


def records_last_scan(entry: CommandEntry, origin: str, *, succeeded: bool) -> bool:
    """A result records the scanner's last scan of the host: it succeeded, and it is the input
    that ended the command (a replay of it too, never a duplicate from elsewhere)."""
    return succeeded and entry.ended_by == origin


def concluded_besides(concluded: Sequence[ConcludedRun], run: RunPlan) -> list[ConcludedRun]:
    """The runs a dispatch concluded other than `run` itself (a run that issued nothing is
    recorded as skipped when it is dispatched, not again as concluded)."""
    return [c for c in concluded if (c.occurrence, c.attempt) != (run.occurrence, run.attempt)]


def skip_reason(skipped_hosts: Mapping[str, int]) -> str:
    """Why a run issued nothing: no host matched, or all targeted hosts skipped for a reason."""
    if not skipped_hosts:
        return "no_host_matched"
    if len(skipped_hosts) == 1:
        (reason,) = skipped_hosts
        return f"all_{reason}"
    return "all_skipped:" + ",".join(sorted(skipped_hosts))
