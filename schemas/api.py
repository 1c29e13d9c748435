"""API bodies and roles: what the HTTP API accepts and answers."""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, create_model

from schemas.alerts import AlertState, AlertType, SubjectType
from schemas.base import CommandReason, ComplianceState, Contract, HostStatus, Timestamp
from schemas.config import ConfigChanges, SchedulerConfig
from schemas.objects import HostLabels, ObjectAttributes


class Role(IntEnum):
    """Roles in increasing power; a caller may do what any lower role may.

    AGENT stands apart, below GUEST: a scanner agent's token, which may only lease commands
    and report results through `/api/agents/...` (and nothing else may call those).
    """

    AGENT = 0
    GUEST = 1
    SECURITY_ANALYST = 2
    SECURITY_ADMIN = 3
    SUPER_ADMIN = 4


# --- errors and acknowledgements ---------------------------------------------------------


class FieldErrorPublic(Contract):
    """One invalid input, named by the field that carried it."""

    field: str = Field(description="Dotted name of the field, e.g. `interval_critical`.")
    location: str = Field(description="Where the field was: body, query, path or header.")
    message: str
    type: str = Field(description="Machine-readable kind of the error.")


class ErrorPublic(Contract):
    """The one shape of every error the API answers."""

    detail: str = Field(description="What went wrong, in words.")
    errors: list[FieldErrorPublic] | None = Field(
        default=None, description="The invalid fields, on 422 answers."
    )


class Accepted(Contract):
    """A write was published as an event; it takes effect asynchronously."""

    event_id: UUID
    status: str = Field(default="accepted")


class HealthPublic(Contract):
    status: str


class ReadinessPublic(Contract):
    """Whether the API can serve: both dependencies must be "ok"."""

    detail: str = Field(description="`ready`, or what is not.")
    status: str
    kafka: str
    database: str


# --- scheduler -----------------------------------------------------------------------------


class SchedulerConfigPublic(SchedulerConfig):
    """The scheduler configuration as projected; defaults (version 0) before any change."""

    updated_at: Timestamp | None = None


class UpcomingScanPublic(Contract):
    """One host whose scan comes next: when it is due and with which priority."""

    host_id: str
    hostname: str | None = None
    state: ComplianceState
    due_at: Timestamp = Field(description="The host's `next_scheduled_scan` (may be past).")
    priority: int = Field(description="The host's `scan_priority`.")


class DispatchLateness(Contract):
    """How late the newest commands went out: `issued_at - due_at` of each, in seconds."""

    commands: int = Field(
        description="Commands measured: the newest issued within the last hour, at most 1,000."
    )
    p50_seconds: float
    p99_seconds: float
    max_seconds: float


class StatusPublic(Contract):
    """The scheduler at a glance, from counters the projector keeps current."""

    enabled: bool
    config_version: int
    hosts_total: int = Field(description="Hosts known to the read model (not deleted).")
    by_state: dict[str, int] = Field(description="Hosts per state, `maintenance` included.")
    in_flight: int = Field(
        description="Hosts with a scan command outstanding: claimed, waiting for a slot or issued."
    )
    waiting: int = Field(
        default=0,
        description="Hosts whose claim waits for a slot (claimed, not yet issued): the cap binds,"
        " or the scheduler is off.",
    )
    held: int = Field(
        default=0,
        description="Claims held because the scheduler is off: `waiting` while `enabled` is"
        " false, else 0. They are issued in rank order once it is on again.",
    )
    maintenance: int
    inactive: int
    down: int
    overdue: int = Field(
        description="Past due and not dispatched: active, up hosts outside maintenance whose "
        "next scan has passed and that have no command in flight."
    )
    past_promise: int = Field(
        default=0,
        description="Past the promise: active hosts outside maintenance whose last successful "
        "scan (or creation, if never scanned) is older than `max_interval_minutes` (48 h).",
    )
    upcoming: list[UpcomingScanPublic] = Field(
        default_factory=list,
        description="The next hosts due (active, up, outside maintenance, no command in flight),"
        " earliest due first; as many as `?upcoming=` asks (10 by default).",
    )
    due_next_hour: int = Field(description="Hosts outside maintenance due within the hour.")
    unmatched_results: int = Field(
        default=0,
        description="Results received whose command_id names no command Kairos issued; "
        "they are kept in history as `unmatched` and change no host.",
    )
    max_concurrent_scans: int
    dispatch_lateness: DispatchLateness | None = Field(
        default=None,
        description="Lateness of the newest commands (read model); null when none was issued "
        "in the last hour.",
    )
    projection_lag_seconds: float | None = Field(
        description="How far the read model trails the events: seconds from the newest event "
        "projected to its projection (worst source); null before the projector wrote anything."
    )
    projection_backlog: int | None = Field(
        description="Messages the projector had yet to apply at its last write; null if unknown."
    )
    projection_applied_at: Timestamp | None = Field(
        description="When the projector last wrote; a stalled projector shows here."
    )
    as_of: Timestamp


def _json_integer(value: object) -> object:
    """Only JSON numbers: `true` and `"5"` are not integers in a JSON body, whatever Python
    would make of them (1.0 still is one, as JSON Schema says)."""
    if isinstance(value, bool | str | bytes):
        raise ValueError("must be a JSON integer")
    return value


def _given_never_null(model: type[BaseModel]) -> dict[str, Any]:
    """The fields of a partial-update model, each optional to give but never null."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if info.annotation == bool | None:
            fields[name] = (StrictBool, Field(default=None, description=info.description))
            continue
        assert info.annotation == int | None, f"{name}: only optional ints or bools are expected"
        # Constraints first, so they stay on the integer schema (minimum/maximum).
        constrained = Annotated[(int, *info.metadata, BeforeValidator(_json_integer))]
        fields[name] = (constrained, Field(default=None, description=info.description))
    return fields


ConfigUpdate: type[BaseModel] = create_model(
    "ConfigUpdate",
    __doc__="Body of PUT /config: the fields to change, at least one, with the ranges of "
    "SchedulerConfig.",
    __config__=ConfigDict(frozen=True, extra="forbid", json_schema_extra={"minProperties": 1}),
    **_given_never_null(ConfigChanges),
)


class MaintenanceUpdate(Contract):
    """Put a host in maintenance (for `duration_hours`, or until turned off) or take it out."""

    enabled: StrictBool
    duration_hours: Annotated[int, Field(ge=1, le=168), BeforeValidator(_json_integer)] | None = (
        Field(default=None, description="Hours; omitted or null = until turned off.")
    )


# --- hosts ---------------------------------------------------------------------------------


class HostCreate(ObjectAttributes):
    """A host to schedule: published as an `object-created` event of type `host`, whose
    attributes (and their size limits) it shares."""

    host_id: str = Field(min_length=1, max_length=255, pattern=r"^[^\x00]*$")
    is_active: StrictBool = True


class HostPublic(Contract):
    """One host in a list."""

    host_id: str
    hostname: str | None
    organization: str | None
    labels: dict[str, str]
    state: ComplianceState
    score: float | None
    current_interval_minutes: int
    next_scheduled_scan: Timestamp
    last_scan_completed: Timestamp | None
    maintenance_mode: bool
    maintenance_until: Timestamp | None
    scan_priority: int
    consecutive_scan_failures: int
    in_flight_command_id: str | None
    is_active: bool
    status: HostStatus
    version: int


class HostImportRow(Contract):
    """One host of a bulk import (a JSON line, an array item or a CSV row)."""

    id: str = Field(min_length=1, max_length=255, pattern=r"^[^\x00]*$")
    hostname: str | None = Field(default=None, max_length=255)
    organization: str | None = Field(default=None, max_length=255)
    labels: HostLabels = Field(default_factory=dict)
    active: StrictBool = True


class HostsImported(Contract):
    """A bulk import was published: one `object-created` event per host."""

    status: str = Field(default="accepted")
    hosts: int = Field(description="Hosts published (one object-created event each).")
    batches: int = Field(description="Batches they were published in, each acknowledged.")


class InitializeAccepted(Accepted):
    """POST /initialize was published; `hosts` is what the read model shows it will re-plan."""

    hosts: int = Field(
        description="Known hosts never scanned successfully and with no command in flight."
    )


class HostsPublic(Contract):
    data: list[HostPublic]
    count: int = Field(description="Hosts matching the filters, over all pages.")
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` for the next page; null on the last page."
    )


class ScanResultPublic(Contract):
    """A scanner's result for one command."""

    kind: Literal["scan"] = "scan"
    event_id: UUID
    command_id: str
    host_id: str
    scanner: str
    status: str = Field(
        description="`succeeded` or `failed` as the scanner reported, or `unmatched` when the "
        "result names no command Kairos issued (it changed nothing)."
    )
    started_at: Timestamp | None
    completed_at: Timestamp
    score: float | None
    passed: int
    failed: int
    severity_critical_failed: int
    severity_high_failed: int
    severity_medium_failed: int
    severity_low_failed: int
    scan_id: str | None
    error: str | None
    matched: bool = Field(
        default=True, description="False: no command Kairos issued has this `command_id`."
    )
    reported_status: str | None = Field(
        default=None, description="What the scanner reported, when `status` is `unmatched`."
    )


class CommandPublic(Contract):
    """A scan command Kairos issued, with its outcome once known."""

    kind: Literal["command"] = "command"
    command_id: str
    host_id: str
    scanner: str
    priority: int
    reason: CommandReason
    state: ComplianceState
    due_at: Timestamp
    issued_at: Timestamp
    deadline: Timestamp
    attempt: int
    schedule_id: str | None
    outcome: str | None = Field(description="completed, failed, timed_out, superseded or null.")
    outcome_at: Timestamp | None


class CommandDetailPublic(CommandPublic):
    results: list[ScanResultPublic] = Field(description="Results received for this command.")


class HostDetailPublic(Contract):
    """A host's schedule and its latest compliance data."""

    host_id: str
    hostname: str | None
    organization: str | None
    labels: dict[str, str]
    state: ComplianceState
    compliance_state: ComplianceState
    score: float | None
    current_interval_minutes: int
    next_scheduled_scan: Timestamp
    last_scan_completed: Timestamp | None
    last_scan_id: str | None
    last_error: str | None
    maintenance_mode: bool
    maintenance_until: Timestamp | None
    scan_priority: int
    consecutive_scan_failures: int
    in_flight_command_id: str | None
    is_active: bool
    status: HostStatus
    version: int
    created_at: Timestamp
    updated_at: Timestamp
    latest_scan: ScanResultPublic | None = Field(
        description="The newest result of the compliance scanner, if any."
    )


class WithdrawnClaimPublic(Contract):
    """A claim withdrawn while it waited for a slot: the host entered maintenance, went down
    or inactive, or was deleted, before the command was issued. No scanner saw it."""

    kind: Literal["withdrawn"] = "withdrawn"
    command_id: str
    host_id: str
    reason: str = Field(description="maintenance, down, inactive or deleted.")
    withdrawn_at: Timestamp


HistoryEntryPublic = Annotated[
    ScanResultPublic | CommandPublic | WithdrawnClaimPublic, Field(discriminator="kind")
]


class HostHistoryPublic(Contract):
    """Scans, commands and withdrawn claims of one host, newest first."""

    data: list[HistoryEntryPublic]
    count: int
    next_cursor: str | None = None


# --- operations ----------------------------------------------------------------------------


class DeadLetterPublic(Contract):
    event_id: UUID
    source_topic: str
    partition: int | None
    offset: int | None
    key: str | None
    error: str
    raw: str
    received_at: Timestamp
    redriven_at: Timestamp | None = Field(default=None, description="When last sent again.")
    redriven_by: str | None = None
    redrive_event_id: str | None = Field(
        default=None, description="The event id of the message last sent again."
    )


class DeadLettersPublic(Contract):
    data: list[DeadLetterPublic]
    count: int
    next_cursor: str | None = None


class AlertPublic(Contract):
    """An alert as the read model holds it; the same fields travel on the `alerts` topic."""

    alert_id: UUID
    alert_type: AlertType
    subject_type: SubjectType
    subject_id: str = Field(description="A host id, a schedule id, or `fleet`.")
    state: AlertState
    severity: Literal["warning", "critical"]
    summary: str
    details: dict[str, Any]
    raised_at: Timestamp
    resolved_at: Timestamp | None = None
    resolution: str | None = None


class AlertsPublic(Contract):
    data: list[AlertPublic]
    count: int = Field(description="Alerts matching the filters.")
    firing: int = Field(description="Alerts firing now, whatever the filters.")
    next_cursor: str | None = None


# --- commands across the fleet, and the workers --------------------------------------------


class CommandState(StrEnum):
    """Where a command is in its life: out and awaiting a result, or ended and how."""

    IN_FLIGHT = "in_flight"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"


class FleetCommandPublic(CommandPublic):
    """A command in the fleet-wide list: its lifecycle (issued, then a result or its
    deadline passing: `outcome` and `outcome_at`), its run and its host's organization."""

    command_state: CommandState = Field(
        description="in_flight until a result or the deadline ends it; then succeeded, failed "
        "or timed_out."
    )
    occurrence: Timestamp | None = Field(
        description="The schedule occurrence (run) the command was issued for; null for the "
        "adaptive scheduler's commands and a backfilled run's."
    )
    organization: str | None = Field(description="The host's organization, as it is now.")


class CommandsPublic(Contract):
    data: list[FleetCommandPublic]
    count: int = Field(description="Commands matching the filters, over all pages.")
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` for the next page; null on the last page."
    )


class WorkerPartitionPublic(Contract):
    """One partition the worker group consumes: who owns it and how far behind it is."""

    topic: str
    partition: int
    owner: str | None = Field(description="The member id assigned the partition; null if none.")
    committed: int | None = Field(description="The group's committed offset; null if none.")
    end: int | None = Field(description="The partition's end offset (the next to be written).")
    lag: int | None = Field(description="end - committed (end when nothing is committed).")


class WorkerMemberPublic(Contract):
    member_id: str
    client_id: str
    client_host: str
    version: str | None = Field(
        description="The Kairos version, when the client id or the member's metadata carries it."
    )
    owns_dispatch: bool = Field(description="Assigned the single dispatch-queue partition.")
    partitions: list[WorkerPartitionPublic]
    lag: int = Field(description="Sum of the lag of the partitions assigned to the member.")


class WorkersPublic(Contract):
    """The worker group as Kafka's group coordinator sees it."""

    group_id: str
    state: str = Field(description="The group's state: Stable, PreparingRebalance, Empty, ...")
    members: list[WorkerMemberPublic]
    dispatch_owner: str | None = Field(
        description="The member id that owns the dispatch queue; null while none does."
    )
    unassigned: list[WorkerPartitionPublic] = Field(
        description="Input partitions no member is assigned (all of them while the group is "
        "rebalancing or empty)."
    )
    lag: int = Field(description="Sum of the lag over every input partition.")
    observed_at: Timestamp = Field(description="When the broker was asked (answers are cached).")
