"""Messages on Kairos-internal topics, between the worker's stages (`streams/stages/`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import Field

from schemas.base import CommandReason, ComplianceState, Contract, Timestamp, WithdrawReason
from schemas.commands import ADAPTIVE_SCANNER
from schemas.config import SchedulerConfig
from schemas.objects import ObjectEvent
from schemas.schedules import RunPlan, Schedule

# --- host signals (host-keyed, processed by the host stage) ------------------


class HostDue(Contract):
    """A worker's due index says this host's wake-up time has come."""

    kind: Literal["host.due"] = "host.due"
    host_id: str
    wake_at: Timestamp


class HostsDue(Contract):
    """The due index's hosts of one partition whose wake-up times came in one tick.

    One signal per partition and tick instead of one per host: a stream pass costs more
    than the host it carries. Sent to the hosts' partition, so the table writes it makes
    land in the right changelog partition.
    """

    kind: Literal["hosts.due"] = "hosts.due"
    host_ids: tuple[str, ...] = Field(min_length=1)
    wake_at: Timestamp


class CommandIssued(Contract):
    """No longer sent: a claim is not marked issued on the host, which saves a pass through
    the host stage per command. Still read, so records an earlier version left on the topic
    are applied as they were meant."""

    kind: Literal["command.issued"] = "command.issued"
    host_id: str
    command_id: str
    issued_at: Timestamp
    deadline: Timestamp


class IssuedBeforeForce(Contract):
    """The dispatcher had already issued the host's command when the host's force request
    for it arrived (the host cannot tell a waiting claim from an issued one): the host scans
    again once that command ends. The same command gives the same `event_id`, so a replay
    is absorbed by the host's dedupe."""

    kind: Literal["command.issued_before_force"] = "command.issued_before_force"
    event_id: UUID
    host_id: str
    command_id: str
    incarnation: str | None = Field(
        default=None,
        description="The incarnation whose force request this answers: a host created again"
        " since ignores it. None from a dispatcher that did not say; taken as the current one.",
    )


class CommandWithdrawn(Contract):
    """The dispatcher's answer to `ClaimWithdrawn`: the claim no longer waits for a slot (it
    was dropped from the queue, or the queue no longer knew it), so the host forgets it. A
    claim already issued gets no answer: its result or timeout ends it as usual."""

    kind: Literal["command.withdrawn"] = "command.withdrawn"
    event_id: UUID
    host_id: str
    command_id: str
    reason: WithdrawReason


class CommandTimedOut(Contract):
    kind: Literal["command.timed_out"] = "command.timed_out"
    host_id: str
    command_id: str
    deadline: Timestamp


class HostReplanRequested(Contract):
    """The global config changed; re-plan this host from its last completion."""

    kind: Literal["host.replan"] = "host.replan"
    host_id: str
    config_version: int
    initialize: bool = False


HostSignal = Annotated[
    HostDue
    | HostsDue
    | CommandIssued
    | IssuedBeforeForce
    | CommandWithdrawn
    | CommandTimedOut
    | HostReplanRequested,
    Field(discriminator="kind"),
]

# --- dispatch queue (single partition, processed by the dispatcher) ----------


class ReleaseOutcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    SUPERSEDED = "superseded"
    WITHDRAWN = "withdrawn"


class DispatchRequested(Contract):
    kind: Literal["dispatch.requested"] = "dispatch.requested"
    command_id: str
    host_id: str
    priority: int
    due_at: Timestamp
    reason: CommandReason
    state: ComplianceState
    attempt: int
    scanner: str = ADAPTIVE_SCANNER
    schedule_id: str | None = None
    args: dict[str, Any] | None = None
    incarnation: str | None = Field(
        default=None,
        description="On a host's force request: the host's incarnation, which the dispatcher's"
        " IssuedBeforeForce answer names.",
    )
    organization: str | None = Field(
        default=None,
        description="The host's organization: commands of equal rank are shared fairly between"
        " organizations.",
    )
    promise_at: Timestamp | None = Field(
        default=None,
        description="When the host breaks the scan-interval promise (its last scan, or its"
        " creation, plus max_interval_minutes): a command close to it outranks the others.",
    )


class SlotReleased(Contract):
    kind: Literal["slot.released"] = "slot.released"
    command_id: str
    outcome: ReleaseOutcome
    host_id: str | None = Field(
        default=None,
        description="On a release sent again for a result read again: the host the result is"
        " for. The dispatcher frees the slot only if the command is that host's.",
    )


class ClaimWithdrawn(Contract):
    """A host left the scannable set (maintenance, down, inactive) while its claim may still
    wait for a slot: the dispatcher drops it if it waits, and answers `CommandWithdrawn`."""

    kind: Literal["claim.withdrawn"] = "claim.withdrawn"
    command_id: str
    host_id: str
    reason: WithdrawReason


class DispatcherWoken(Contract):
    """Sent by the dispatcher's own timer when a deadline passed or capacity may be free."""

    kind: Literal["dispatcher.woken"] = "dispatcher.woken"
    at: Timestamp


class DispatchBatch(Contract):
    """Requests and releases of one pass of a stage, in the order they were made.

    A stream pass costs the dispatcher more than the request it carries: the host stage sends
    the claims of a whole due signal, or of a recovery, as one record."""

    kind: Literal["dispatch.batch"] = "dispatch.batch"
    messages: tuple[
        Annotated[DispatchRequested | SlotReleased | ClaimWithdrawn, Field(discriminator="kind")],
        ...,
    ] = Field(min_length=1)


DispatchMessage = Annotated[
    DispatchRequested | SlotReleased | ClaimWithdrawn | DispatcherWoken | DispatchBatch,
    Field(discriminator="kind"),
]

# --- scheduler control (single partition, read whole by every worker) --------


class ConfigPublished(Contract):
    kind: Literal["config"] = "config"
    config: SchedulerConfig


class InitializePublished(Contract):
    kind: Literal["initialize"] = "initialize"
    requested_at: Timestamp
    event_id: str


ControlMessage = Annotated[ConfigPublished | InitializePublished, Field(discriminator="kind")]


# --- schedule signals (kairos-host-signals, processed by the schedule stage) -
# Keyed by schedule id, except ScheduleFanOut: it goes to each partition holding targets.


class ScheduleDue(Contract):
    """The due index says this schedule's wake-up time has come (key = schedule id)."""

    kind: Literal["schedule.due"] = "schedule.due"
    schedule_id: str
    wake_at: Timestamp


class SchedulesDue(Contract):
    """The due index's schedules of one partition whose wake-up times came in one tick.

    As `HostsDue` for hosts: one signal per partition and tick instead of one `ScheduleDue`
    per schedule; sent to the schedules' partition (no key), so the table writes it makes land
    in the right changelog partition. Each schedule is handled as its own `ScheduleDue`.
    """

    kind: Literal["schedule.due.batch"] = "schedule.due.batch"
    schedule_ids: tuple[str, ...] = Field(min_length=1)
    wake_at: Timestamp


class ScheduleFanOut(Contract):
    """Select and dispatch the targets of `run` held in the partition this is sent to."""

    kind: Literal["schedule.fanout"] = "schedule.fanout"
    schedule: Schedule
    run: RunPlan
    expected: int = Field(description="How many partitions the run was sent to.")


class ScheduleFanOuts(Contract):
    """The fan-outs of one pass that go to the same partition, as one record; each is handled
    there as if it came alone, and their claims reach the dispatcher together."""

    kind: Literal["schedule.fanout.batch"] = "schedule.fanout.batch"
    fan_outs: tuple[ScheduleFanOut, ...] = Field(min_length=1)


class ScheduleFanOutDone(Contract):
    """One partition's part of a run: how many commands it sent (key = schedule id)."""

    kind: Literal["schedule.fanout_done"] = "schedule.fanout_done"
    schedule_id: str
    run: RunPlan
    partition: int
    issued: int
    skipped: int = 0
    skipped_hosts: dict[str, int] = Field(
        default_factory=dict, description="Targeted hosts not scanned, by reason."
    )


class ScheduleCommandEnded(Contract):
    """A command of a tracked run ended (result or timeout), key = schedule id."""

    kind: Literal["schedule.command_ended"] = "schedule.command_ended"
    schedule_id: str
    occurrence: Timestamp
    attempt: int
    command_id: str
    host_id: str
    outcome: ReleaseOutcome
    error: str | None = None


class ScheduleObjectEvent(Contract):
    """An object event matching this schedule's trigger, re-keyed by schedule id."""

    kind: Literal["schedule.object_event"] = "schedule.object_event"
    schedule_id: str
    event: ObjectEvent


ScheduleSignal = Annotated[
    ScheduleDue
    | SchedulesDue
    | ScheduleFanOut
    | ScheduleFanOuts
    | ScheduleFanOutDone
    | ScheduleCommandEnded
    | ScheduleObjectEvent,
    Field(discriminator="kind"),
]
