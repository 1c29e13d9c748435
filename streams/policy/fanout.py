"""A fanned-out run's tally: which partitions answered, what they issued, which ends wait.

Hosts are partitioned by host id, so a tracked run goes to every partition that may hold its
targets (`ScheduleFanOut`) and each answers once (`ScheduleFanOutDone`). The run counts as
dispatched when the last partition has answered. A command's end can overtake that last
answer; it is held here until the run is dispatched, then handed back. A replayed answer is
recognised and counts nothing. Pure: the schedule stage keeps one `PendingFanOuts` per
schedule in its `schedule-fanouts` table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.internal import ScheduleCommandEnded, ScheduleFanOutDone
from schemas.schedules import RunPlan


class FanOutTally(BaseModel):
    """One run's answers so far."""

    model_config = ConfigDict(frozen=True)

    run: RunPlan
    expected: int = Field(description="Partitions the run was sent to.")
    parts: tuple[int, ...] = Field(default=(), description="Partitions that answered.")
    issued: int = 0
    skipped: int = 0
    skipped_hosts: dict[str, int] = Field(default_factory=dict)


class PendingFanOuts(BaseModel):
    """A schedule's runs still being answered, and the ends that overtook their run."""

    model_config = ConfigDict(frozen=True)

    version: Literal[1] = 1
    """Of this stored shape; records written before it was typed have none and load as 1."""
    runs: dict[str, FanOutTally] = Field(default_factory=dict)
    early: tuple[ScheduleCommandEnded, ...] = ()


@dataclass(frozen=True)
class Answered:
    """What one partition's answer did to the tally."""

    pending: PendingFanOuts
    duplicate: bool = False
    """A replayed answer, or one for a run no longer pending: nothing was counted."""
    dispatched: FanOutTally | None = None
    """The whole tally once the last partition answered."""
    ends: tuple[ScheduleCommandEnded, ...] = ()
    """Ends of the now-dispatched run that were held: apply them now, in this order."""


def run_key(run: RunPlan) -> str:
    return f"{run.occurrence.isoformat()}/{run.attempt}"


def fanned_out(pending: PendingFanOuts, run: RunPlan, expected: int) -> PendingFanOuts:
    """`run` was sent to `expected` partitions: wait for as many answers."""
    tally = FanOutTally(run=run, expected=expected)
    return pending.model_copy(update={"runs": {**pending.runs, run_key(run): tally}})


def answered(pending: PendingFanOuts, done: ScheduleFanOutDone) -> Answered:
    """Count one partition's answer; the last one dispatches the run and releases its ends."""
    key = run_key(done.run)
    tally = pending.runs.get(key)
    if tally is None or done.partition in tally.parts:
        return Answered(pending, duplicate=True)
    skipped_hosts = dict(tally.skipped_hosts)
    for reason, count in done.skipped_hosts.items():
        skipped_hosts[reason] = skipped_hosts.get(reason, 0) + count
    tally = tally.model_copy(
        update={
            "parts": (*tally.parts, done.partition),
            "issued": tally.issued + done.issued,
            "skipped": tally.skipped + done.skipped,
            "skipped_hosts": skipped_hosts,
        }
    )
    if len(tally.parts) < tally.expected:
        return Answered(pending.model_copy(update={"runs": {**pending.runs, key: tally}}))
    runs = {k: v for k, v in pending.runs.items() if k != key}
    ours = (done.run.occurrence, done.run.attempt)
    ends = tuple(e for e in pending.early if (e.occurrence, e.attempt) == ours)
    early = tuple(e for e in pending.early if (e.occurrence, e.attempt) != ours)
    left = pending.model_copy(update={"runs": runs, "early": early})
    return Answered(left, dispatched=tally, ends=ends)


def held(pending: PendingFanOuts, ended: ScheduleCommandEnded) -> PendingFanOuts:
    """An end that overtook its run's last answer waits for it."""
    return pending.model_copy(update={"early": (*pending.early, ended)})


def unanswered(pending: PendingFanOuts) -> tuple[FanOutTally, ...]:
    """The runs some partition has not answered yet.

    Sent again after a restart: a fan-out can be lost when a worker dies after storing its run,
    before the fan-out reached the broker, and the run would then wait for the run timeout. A
    partition that had the first one handles it once more harmlessly (its command ids are the
    same, so the dispatcher absorbs them), and its second answer counts nothing."""
    return tuple(tally for tally in pending.runs.values() if len(tally.parts) < tally.expected)
