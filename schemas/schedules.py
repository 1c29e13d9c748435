"""Generic schedules: the definition, its `schedule.*` events and its persisted state (v1).

A schedule runs one scanner over a target set on a recurrence (cron, interval, RRULE) and/or
when an object changes. Everything here is plain data validated by pydantic and the standard
library only: the shape of cron and RRULE text is checked here, their full meaning
(kairos.floor.cron, dateutil) in `kairos.floor.recurrence.schedule_problem`.

Events travel on `schedule-changes` with key = schedule id.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    Discriminator,
    Field,
    JsonValue,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    field_validator,
    model_validator,
)

from schemas.base import ComplianceState, Contract, HostStatus, Message, Timestamp
from schemas.objects import ObjectAttributes, Operation

SCHEDULE_STATE_FORMAT: Literal[1] = 1
HOST_OBJECT_TYPE = "host"

_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$"
ARGS_MAX_BYTES = 16_384
"""A schedule's args travel in every command it sends and in its state record."""
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,63}$"

# --- policies -------------------------------------------------------------------------


class CatchupPolicy(StrEnum):
    """What to do with occurrences missed while Kairos could not fire them (an outage)."""

    SKIP = "skip"
    """Run none of the missed occurrences; carry on with the next one."""
    ONCE = "once"
    """Run the latest missed occurrence once, if it is within the catch-up window."""
    ALL = "all"
    """Run every missed occurrence within the catch-up window."""


class OverlapPolicy(StrEnum):
    """What to do with an occurrence that comes due while a run of the schedule is in flight."""

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    """Hold the latest such occurrence and start it when the runs in flight have finished."""
    ALLOW = "allow"


class DstPolicy(StrEnum):
    """How a wall-clock time that a DST change skips or repeats is run.

    A skipped time (02:30 on a spring-forward day) runs at the first instant after the gap
    (03:00) under RUN_ONCE_SHIFTED and RUN_BOTH, and not at all under SKIP. A repeated time
    (02:30 on a fall-back day) runs at its first instant under RUN_ONCE_SHIFTED and SKIP and at
    both instants under RUN_BOTH. Cron whose minute or hour field starts with `*` and RRULEs
    with FREQ=HOURLY or MINUTELY follow real time whatever this says: a repeated hour runs
    again, a skipped hour has nothing to run (Vixie cron's rule; docs/cron.md).
    """

    RUN_ONCE_SHIFTED = "run_once_shifted"
    SKIP = "skip"
    RUN_BOTH = "run_both"


class ExclusionAction(StrEnum):
    DEFER = "defer"
    """Hold an occurrence that falls in a blackout window back to the window's end."""
    SKIP = "skip"
    """Drop an occurrence that falls in a blackout window."""


# --- text checks shared with the policy (standard library only) --------------------------

_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,?#()\-]{1,64}$")
_RRULE_PARTS = frozenset(
    {
        "FREQ",
        "INTERVAL",
        "BYMONTH",
        "BYMONTHDAY",
        "BYYEARDAY",
        "BYWEEKNO",
        "BYDAY",
        "BYHOUR",
        "BYMINUTE",
        "BYSECOND",
        "BYSETPOS",
        "WKST",
    }
)
_RRULE_REFUSED = {
    "COUNT": "use the schedule's max_runs instead of COUNT",
    "UNTIL": "use the schedule's end_at instead of UNTIL",
    "DTSTART": "use the schedule's start_at instead of DTSTART",
}
RRULE_FREQUENCIES = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY")
_RRULE_VALUE = re.compile(r"^[A-Z0-9,+\-]{1,200}$")
_TIMEZONE_NAME = re.compile(r"^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$")


def timezone_problem(name: str) -> str | None:
    """Why `name` is not an IANA timezone zoneinfo can load, or None when it is one."""
    if not _TIMEZONE_NAME.fullmatch(name) or len(name) > 64:
        return f"unknown timezone {name!r}: use an IANA name such as 'Europe/Amsterdam'"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return f"unknown timezone {name!r}: use an IANA name such as 'Europe/Amsterdam'"
    return None


def cron_shape_problem(expression: str) -> str | None:
    """Why `expression` cannot be a 5- or 6-field cron expression, judged by its text alone."""
    fields = expression.split()
    if len(fields) not in (5, 6):
        return (
            f"cron expression {expression!r} has {len(fields)} fields; expected 5 "
            "(minute hour day-of-month month day-of-week) or 6 (the same plus seconds last)"
        )
    for value in fields:
        if not _CRON_FIELD.fullmatch(value):
            return f"cron expression {expression!r}: field {value!r} has characters cron lacks"
    return None


def rrule_body(rule: str) -> str:
    """`rule` without surrounding blanks and an optional `RRULE:` prefix, upper-cased."""
    body = rule.strip()
    if body.upper().startswith("RRULE:"):
        body = body[len("RRULE:") :]
    return body.upper()


def rrule_shape_problem(rule: str) -> str | None:
    """Why `rule` cannot be an RFC 5545 RRULE Kairos accepts, judged by its text alone."""
    body = rrule_body(rule)
    if not body:
        return "RRULE is empty; expected e.g. 'FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1'"
    parts: dict[str, str] = {}
    for part in body.split(";"):
        name, equals, value = part.partition("=")
        if not equals or not name:
            return f"RRULE {rule!r}: part {part!r} is not NAME=VALUE"
        if name in _RRULE_REFUSED:
            return f"RRULE {rule!r}: {_RRULE_REFUSED[name]}"
        if name not in _RRULE_PARTS:
            return f"RRULE {rule!r}: unknown part {name!r}"
        if name in parts:
            return f"RRULE {rule!r}: part {name!r} appears twice"
        if not _RRULE_VALUE.fullmatch(value):
            return f"RRULE {rule!r}: value {value!r} of {name} is not valid"
        parts[name] = value
    frequency = parts.get("FREQ")
    if frequency is None:
        return f"RRULE {rule!r} has no FREQ"
    if frequency not in RRULE_FREQUENCIES:
        return f"RRULE {rule!r}: FREQ={frequency} is not one of {', '.join(RRULE_FREQUENCIES)}"
    interval = parts.get("INTERVAL", "1")
    if not interval.isdigit() or not 1 <= int(interval) <= 1000:
        return f"RRULE {rule!r}: INTERVAL={interval} must be a whole number from 1 to 1000"
    return _bysetpos_problem(rule, parts)


_DAYS_PER_PERIOD = {"YEARLY": 366, "MONTHLY": 31, "WEEKLY": 7}


def _bysetpos_problem(rule: str, parts: Mapping[str, str]) -> str | None:
    """A BYSETPOS beyond what one period can hold never matches; dateutil would then search
    period after period (minute after minute for MINUTELY) for centuries."""
    if "BYSETPOS" not in parts:
        return None
    frequency = parts["FREQ"]

    def count(name: str) -> int:
        return len(parts[name].split(",")) if name in parts else 1

    times = count("BYSECOND")
    if frequency != "MINUTELY":
        times *= count("BYMINUTE")
    if frequency not in ("MINUTELY", "HOURLY"):
        times *= count("BYHOUR")
    most = _DAYS_PER_PERIOD.get(frequency, 1) * times
    for position in parts["BYSETPOS"].split(","):
        if not position.lstrip("+-").isdigit() or not 1 <= abs(int(position)) <= most:
            return (
                f"RRULE {rule!r}: BYSETPOS={position} can never select anything; "
                f"a FREQ={frequency} period holds at most {most} instants"
            )
    return None


# --- recurrence -----------------------------------------------------------------------


class CronRecurrence(Contract):
    """Cron, 5 fields or 6 with seconds as the last field: the dialect of docs/cron.md."""

    kind: Literal["cron"] = "cron"
    expression: str = Field(min_length=1, max_length=200)

    @field_validator("expression")
    @classmethod
    def _cron_shape(cls, expression: str) -> str:
        problem = cron_shape_problem(expression)
        if problem:
            raise ValueError(problem)
        return " ".join(expression.split())


class IntervalRecurrence(Contract):
    """A fixed elapsed time between occurrences, anchored at start_at or else the UTC epoch.

    Elapsed time, not wall-clock time: `days: 1` is always 24 hours, also across DST.
    """

    kind: Literal["interval"] = "interval"
    days: int = Field(default=0, ge=0, le=366)
    hours: int = Field(default=0, ge=0, le=8784)
    minutes: int = Field(default=0, ge=0, le=527_040)
    seconds: int = Field(default=0, ge=0, le=31_622_400)

    @property
    def every(self) -> timedelta:
        return timedelta(
            days=self.days, hours=self.hours, minutes=self.minutes, seconds=self.seconds
        )

    @model_validator(mode="after")
    def _positive_and_bounded(self) -> IntervalRecurrence:
        if self.every <= timedelta(0):
            raise ValueError("an interval needs at least one second in total")
        if self.every > timedelta(days=366):
            raise ValueError("an interval may be at most 366 days")
        return self


class RRuleRecurrence(Contract):
    """An RFC 5545 RRULE without COUNT/UNTIL/DTSTART (use max_runs/end_at/start_at).

    DTSTART is the schedule's start_at in its timezone, or 1970-01-01T00:00 local time.
    """

    kind: Literal["rrule"] = "rrule"
    rule: str = Field(min_length=1, max_length=500)

    @field_validator("rule")
    @classmethod
    def _rrule_shape(cls, rule: str) -> str:
        problem = rrule_shape_problem(rule)
        if problem:
            raise ValueError(problem)
        return rrule_body(rule)


class NoRecurrence(Contract):
    """Runs only when triggered: by an object event or a `schedule.triggered` request."""

    kind: Literal["none"] = "none"


Recurrence: TypeAlias = Annotated[
    CronRecurrence | IntervalRecurrence | RRuleRecurrence | NoRecurrence,
    Field(discriminator="kind"),
]
WindowRecurrence: TypeAlias = Annotated[
    CronRecurrence | RRuleRecurrence, Field(discriminator="kind")
]


class ExclusionWindow(Contract):
    """A recurring blackout: starts when `recurrence` fires, lasts `duration_seconds`."""

    recurrence: WindowRecurrence
    duration_seconds: int = Field(ge=60, le=7 * 86_400)

    @property
    def duration(self) -> timedelta:
        return timedelta(seconds=self.duration_seconds)


MAX_EXCLUSION_SECONDS = 7 * 86_400

# --- targets and their filter ---------------------------------------------------------


class FilterOp(StrEnum):
    EQ = "eq"
    NE = "ne"
    IN = "in"
    NOT_IN = "not_in"
    EXISTS = "exists"
    PREFIX = "prefix"
    GLOB = "glob"
    LT = "lt"
    GT = "gt"


STRING_FIELDS = ("hostname", "ip", "os", "organization")
FILTER_FIELDS = (*STRING_FIELDS, "is_active", "status", "state")
LABEL_FIELD_PREFIX = "labels."
_LABEL_KEY = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_./\-]{0,61}[A-Za-z0-9])?$")
ORDERED_STATES = (
    ComplianceState.CRITICAL,
    ComplianceState.LOW,
    ComplianceState.PARTIAL,
    ComplianceState.MOSTLY_COMPLIANT,
    ComplianceState.COMPLIANT,
)
"""`lt`/`gt` on `state` follow this order; unknown and maintenance compare with nothing."""
MAX_FILTER_VALUE_CHARS = 256
MAX_FILTER_LIST = 256
MAX_FILTER_CONDITIONS = 64
MAX_FILTER_DEPTH = 6

FilterScalar: TypeAlias = StrictBool | StrictInt | StrictFloat | StrictStr | None
FilterValue: TypeAlias = FilterScalar | tuple[FilterScalar, ...]


def filter_field_problem(field: str) -> str | None:
    """Why `field` is not a field a target filter may read, or None."""
    if field in FILTER_FIELDS:
        return None
    if field.startswith(LABEL_FIELD_PREFIX) and _LABEL_KEY.fullmatch(
        field[len(LABEL_FIELD_PREFIX) :]
    ):
        return None
    return (
        f"unknown filter field {field!r}: use one of {', '.join(FILTER_FIELDS)} "
        "or labels.<key> (letters, digits, '_', '.', '/', '-')"
    )


class Condition(Contract):
    """One test on a host: `{"field": "labels.env", "op": "eq", "value": "prod"}`.

    Values are plain JSON data compared in Python; they are never SQL or code.
    """

    field: str = Field(max_length=80)
    op: FilterOp
    value: FilterValue = None

    @field_validator("value", mode="before")
    @classmethod
    def _plain_value(cls, value: Any) -> Any:
        items = value if isinstance(value, list | tuple) else [value]
        if any(not isinstance(item, str | int | float | bool | None) for item in items):
            raise ValueError(
                f"filter value {value!r} is not a JSON string, number, boolean, null or a "
                "list of those"
            )
        return value

    @model_validator(mode="after")
    def _field_op_and_value_agree(self) -> Condition:
        problem = filter_field_problem(self.field) or _condition_problem(self)
        if problem:
            raise ValueError(problem)
        return self


def _condition_problem(condition: Condition) -> str | None:
    field, op, value = condition.field, condition.op, condition.value
    where = f"filter {field!r} {op.value}"
    items = value if isinstance(value, tuple) else (value,)
    for item in items:
        if isinstance(item, str) and len(item) > MAX_FILTER_VALUE_CHARS:
            return f"{where}: a value is longer than {MAX_FILTER_VALUE_CHARS} characters"
    if op is FilterOp.EXISTS:
        if value is not None and not isinstance(value, bool):
            return f"{where}: value must be true, false or omitted"
        return None
    if op in (FilterOp.IN, FilterOp.NOT_IN):
        if not isinstance(value, tuple) or not value:
            return f"{where}: value must be a non-empty list"
        if len(value) > MAX_FILTER_LIST:
            return f"{where}: at most {MAX_FILTER_LIST} values"
    elif isinstance(value, tuple):
        return f"{where}: value must be a single value, not a list"
    elif value is None:
        return f"{where}: value is required"
    if op in (FilterOp.PREFIX, FilterOp.GLOB) and not isinstance(value, str):
        return f"{where}: value must be a string"
    if op in (FilterOp.LT, FilterOp.GT):
        if field in ("is_active", "status"):
            return f"{where}: {field} has no order"
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return f"{where}: value must be a string or a number"
        if field == "ip" and not _is_ip(value):
            return f"{where}: {value!r} is not an IP address"
    for item in items:
        problem = _value_problem(field, item)
        if problem:
            return f"{where}: {problem}"
    return None


def _value_problem(field: str, item: object) -> str | None:
    if field == "is_active":
        return None if isinstance(item, bool) else f"{item!r} is not true or false"
    if field == "status":
        allowed: tuple[str, ...] = tuple(status.value for status in HostStatus)
    elif field == "state":
        allowed = tuple(state.value for state in ComplianceState)
    elif field.startswith(LABEL_FIELD_PREFIX):
        ok = isinstance(item, str) or (isinstance(item, int | float) and not isinstance(item, bool))
        return None if ok else f"{item!r} is not a string or a number"
    else:
        return None if isinstance(item, str) else f"{item!r} is not a string"
    return None if item in allowed else f"{item!r} is not one of {', '.join(allowed)}"


def _is_ip(value: object) -> bool:
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return False
    return True


def _filter_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        if "all" in value:
            return "all"
        if "any" in value:
            return "any"
        return "condition"
    if isinstance(value, Condition):
        return "condition"
    if isinstance(value, AllOf):
        return "all"
    if isinstance(value, AnyOf):
        return "any"
    return None


FilterNode: TypeAlias = Annotated[
    Annotated[Condition, Tag("condition")]
    | Annotated["AllOf", Tag("all")]
    | Annotated["AnyOf", Tag("any")],
    Discriminator(
        _filter_kind,
        custom_error_type="invalid_filter",
        custom_error_message=(
            "a filter is a condition {field, op, value} or a group {all: [...]} / {any: [...]}"
        ),
    ),
]


class AllOf(Contract):
    """True when every member is true."""

    all: tuple[FilterNode, ...] = Field(min_length=1, max_length=MAX_FILTER_CONDITIONS)


class AnyOf(Contract):
    """True when at least one member is true."""

    any: tuple[FilterNode, ...] = Field(min_length=1, max_length=MAX_FILTER_CONDITIONS)


AllOf.model_rebuild()
AnyOf.model_rebuild()


def _filter_size(node: Condition | AllOf | AnyOf, depth: int = 1) -> tuple[int, int]:
    """(conditions, depth) of a filter tree."""
    if isinstance(node, Condition):
        return 1, depth
    members = node.all if isinstance(node, AllOf) else node.any
    sizes = [_filter_size(member, depth + 1) for member in members]
    return sum(size for size, _ in sizes), max(deepest for _, deepest in sizes)


class Targets(Contract):
    """Which objects a run scans: all objects of `object_type`, narrowed by ids and filter.

    `filter` may be one condition, a group, or a list (read as `all`). It only applies to
    hosts. An empty target set is normal: the run is recorded as skipped.
    """

    object_type: str = Field(default=HOST_OBJECT_TYPE, min_length=1, max_length=64)
    object_ids: tuple[Annotated[str, Field(min_length=1, max_length=255)], ...] | None = Field(
        default=None, max_length=10_000
    )
    filter: FilterNode | None = None

    @field_validator("filter", mode="before")
    @classmethod
    def _list_means_all(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return {"all": list(value)}
        return value

    @model_validator(mode="after")
    def _bounded_filter_on_hosts(self) -> Targets:
        if self.filter is None:
            return self
        if self.object_type != HOST_OBJECT_TYPE:
            raise ValueError(f"a filter applies to hosts only, not to {self.object_type!r}")
        conditions, depth = _filter_size(self.filter)
        if conditions > MAX_FILTER_CONDITIONS:
            raise ValueError(f"a filter may hold at most {MAX_FILTER_CONDITIONS} conditions")
        if depth > MAX_FILTER_DEPTH:
            raise ValueError(f"a filter may nest at most {MAX_FILTER_DEPTH} levels deep")
        return self


class Trigger(Contract):
    """Run for one object when an object of type `run_on` undergoes `operation`."""

    run_on: str = Field(min_length=1, max_length=64)
    operation: Operation


# --- the schedule ---------------------------------------------------------------------


class Schedule(Contract):
    """A generic schedule. `name` is unique across schedules (enforced where all are known)."""

    id: str = Field(pattern=_ID_PATTERN)
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)
    scanner: str = Field(pattern=_NAME_PATTERN)
    args: dict[str, JsonValue] = Field(
        default_factory=dict,
        description=f"Passed to the scanner in every command; at most {ARGS_MAX_BYTES} B of JSON.",
    )
    priority: int = Field(default=5, ge=1, le=10, description="10 is the most urgent.")
    is_system: bool = False
    recurrence: Recurrence
    timezone: str = Field(default="UTC", description="IANA name; recurrences run in it.")
    start_at: Timestamp | None = None
    end_at: Timestamp | None = None
    max_runs: int | None = Field(default=None, ge=1)
    targets: Targets = Field(default_factory=Targets)
    trigger: Trigger | None = None
    grace_period_seconds: int = Field(
        default=0,
        ge=0,
        le=366 * 86_400,
        description="Skip a host whose last scan by this scanner finished this recently.",
    )
    catchup: CatchupPolicy = CatchupPolicy.ONCE
    catchup_window_seconds: int = Field(
        default=86_400, ge=0, le=366 * 86_400, description="How late a missed run may start."
    )
    overlap: OverlapPolicy = OverlapPolicy.SKIP
    dst_policy: DstPolicy = DstPolicy.RUN_ONCE_SHIFTED
    exclusions: tuple[ExclusionWindow, ...] = Field(default=(), max_length=16)
    exclusion_action: ExclusionAction = ExclusionAction.DEFER
    jitter_seconds: int = Field(
        default=0,
        ge=0,
        le=86_400,
        description="Delay each occurrence by a stable amount in [0, jitter]; keep it below "
        "the time between occurrences.",
    )
    max_retries: int = Field(default=5, ge=0, le=100)
    failure_threshold: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="A run whose failed commands exceed this share of its ended commands "
        "(or are all of them) fails: backoff, retry, self-disable after max_retries. Below it "
        "the run is partially_failed, which is not a failure of the schedule.",
    )

    @field_validator("args")
    @classmethod
    def _bounded_args(cls, args: dict[str, JsonValue]) -> dict[str, JsonValue]:
        size = len(json.dumps(args, separators=(",", ":"), default=str).encode())
        if size > ARGS_MAX_BYTES:
            raise ValueError(
                f"args are {size} bytes of JSON; at most {ARGS_MAX_BYTES} travel in each command"
            )
        return args

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, name: str) -> str:
        problem = timezone_problem(name)
        if problem:
            raise ValueError(problem)
        return name

    @model_validator(mode="after")
    def _consistent(self) -> Schedule:
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            raise ValueError("end_at must be after start_at")
        if self.trigger and self.trigger.run_on != self.targets.object_type:
            raise ValueError(
                f"trigger.run_on {self.trigger.run_on!r} must be the targets' object_type "
                f"{self.targets.object_type!r}: the triggering object is what gets scanned"
            )
        return self

    @property
    def grace_period(self) -> timedelta:
        return timedelta(seconds=self.grace_period_seconds)


# --- events on schedule-changes (key = schedule id) -------------------------------------


class _ScheduleChange(Message):
    occurred_at: Timestamp
    actor: str = Field(default="system", max_length=255)
    schedule_id: str = Field(pattern=_ID_PATTERN)


class ScheduleUpserted(_ScheduleChange):
    """Creates the schedule or replaces its definition."""

    type: Literal["schedule.upserted"] = "schedule.upserted"
    schedule: Schedule
    create_only: bool = Field(
        default=False,
        description="Create, never replace: refused (to dead-letters, with the reason) when a"
        " schedule of this id exists. The API's create sets it.",
    )
    expected_version: int | None = Field(
        default=None,
        ge=1,
        description="Replace only the schedule at this version (the API sends its If-Match):"
        " refused when the schedule has changed since, or no longer exists. None: any version.",
    )
    expected_incarnation: str | None = Field(
        default=None,
        max_length=255,
        description="With expected_version: the incarnation it belongs to, so a schedule"
        " deleted and created again since is not mistaken for the one read.",
    )

    @model_validator(mode="after")
    def _same_id(self) -> ScheduleUpserted:
        if self.schedule.id != self.schedule_id:
            raise ValueError(
                f"schedule.id {self.schedule.id!r} differs from schedule_id {self.schedule_id!r}"
            )
        return self


class ScheduleDeleted(_ScheduleChange):
    """Deletes the schedule. A system schedule only with `system` set (SUPER_ADMIN's delete)."""

    type: Literal["schedule.deleted"] = "schedule.deleted"
    system: bool = Field(
        default=False, description="Set by the API for SUPER_ADMIN: may delete a system schedule."
    )
    expected_version: int | None = Field(
        default=None,
        ge=1,
        description="Delete only the schedule at this version (If-Match); None: any version.",
    )
    expected_incarnation: str | None = Field(default=None, max_length=255)


class ScheduleEnabled(_ScheduleChange):
    """Turns a disabled schedule on; occurrences during the disabled time are not caught up."""

    type: Literal["schedule.enabled"] = "schedule.enabled"


class ScheduleDisabled(_ScheduleChange):
    """Turns a schedule off. Kairos emits one itself (actor "kairos") after max_retries."""

    type: Literal["schedule.disabled"] = "schedule.disabled"
    reason: str | None = Field(default=None, max_length=500)


class SchedulePaused(_ScheduleChange):
    """Holds occurrences back; on resume they are caught up by the catch-up policy."""

    type: Literal["schedule.paused"] = "schedule.paused"
    note: str | None = Field(default=None, max_length=500)


class ScheduleResumed(_ScheduleChange):
    type: Literal["schedule.resumed"] = "schedule.resumed"


class ScheduleTriggered(_ScheduleChange):
    """Run the schedule now: a manual run, keyed by occurred_at, under the overlap policy.

    Allowed while paused, refused while disabled; not counted toward max_runs.
    """

    type: Literal["schedule.triggered"] = "schedule.triggered"
    overlap: OverlapPolicy | None = Field(
        default=None, description="The overlap policy for this request; None: the schedule's."
    )


class ScheduleBackfillRequested(_ScheduleChange):
    """Run every occurrence with start <= occurrence < end (and before now) again."""

    type: Literal["schedule.backfill_requested"] = "schedule.backfill_requested"
    start: Timestamp
    end: Timestamp
    overlap: OverlapPolicy | None = Field(
        default=None,
        description="With runs in flight: skip drops the backfill, buffer_one keeps its latest "
        "occurrence, allow (and None) queues them all behind the runs in flight.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> ScheduleBackfillRequested:
        if self.end <= self.start:
            raise ValueError("backfill end must be after start")
        return self


ScheduleEventType: TypeAlias = (
    ScheduleUpserted
    | ScheduleDeleted
    | ScheduleEnabled
    | ScheduleDisabled
    | SchedulePaused
    | ScheduleResumed
    | ScheduleTriggered
    | ScheduleBackfillRequested
)
ScheduleEvent: TypeAlias = Annotated[ScheduleEventType, Field(discriminator="type")]
"""Every `schedule.*` event; all are members of `schemas.changes.ScheduleChange`."""

# --- runs -----------------------------------------------------------------------------


class RunReason(StrEnum):
    SCHEDULE = "schedule"
    TRIGGER = "trigger"


class RunOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    """Every command of the run finished without failure."""
    SKIPPED = "skipped"
    """The run found nothing to do (no targets). Never a failure, never retried."""
    PARTIALLY_FAILED = "partially_failed"
    """Some commands failed, no more than the schedule's failure_threshold: not a failure."""
    FAILED = "failed"


class RunPlan(Contract):
    """One run the policy decided to start: select its targets, then dispatch one command each.

    `occurrence` keys the command ids (with host and attempt), so every worker and every
    replay derive the same ids. `host_ids` (retries) limits the run to those hosts.
    """

    schedule_id: str
    occurrence: Timestamp
    due_at: Timestamp
    reason: RunReason = RunReason.SCHEDULE
    attempt: int = Field(default=1, ge=1)
    manual: bool = False
    backfill: bool = False
    backfill_id: str | None = Field(
        default=None,
        description="The backfill request this run belongs to; it keys the command ids, so a "
        "backfilled occurrence that ran before gets commands of its own.",
    )
    incarnation: str | None = None
    object_id: str | None = None
    operation: Operation | None = None
    object_attributes: ObjectAttributes | None = None
    host_ids: tuple[str, ...] | None = None

    @property
    def tracked(self) -> bool:
        """Whether the schedule state follows this run (overlap, outcome, retries)."""
        return self.reason is RunReason.SCHEDULE


# --- persisted state (versioned) ------------------------------------------------------


class ActiveRun(Contract):
    """A run in flight: planned, then dispatched; counts, not command ids, so the state
    stays the same size however many hosts the run covers."""

    occurrence: Timestamp
    attempt: int = Field(default=1, ge=1)
    manual: bool = False
    backfill: bool = False
    backfill_id: str | None = None
    started_at: Timestamp
    host_ids: tuple[str, ...] | None = None
    dispatched: bool = False
    pending_commands: int = Field(default=0, ge=0, description="Commands not finished yet.")
    finished: int = 0
    failed: int = Field(default=0, ge=0, description="Commands that failed or timed out.")
    failed_host_ids: tuple[str, ...] = ()
    failed_unattributed: bool = Field(
        default=False, description="A command failed without a host id: retry every target."
    )
    last_error: str | None = None


class PendingRetry(Contract):
    """A failed run to start again (attempt `attempt`) at `due_at`."""

    occurrence: Timestamp
    attempt: int = Field(ge=2)
    due_at: Timestamp
    manual: bool = False
    backfill: bool = False
    backfill_id: str | None = None
    host_ids: tuple[str, ...] | None = None


class BufferedRun(Contract):
    """The one occurrence held back under OverlapPolicy.BUFFER_ONE."""

    occurrence: Timestamp
    due_at: Timestamp
    manual: bool = False


class QueuedRun(Contract):
    """An occurrence waiting for the runs before it (a backfill, an "all" catch-up).

    They run one after another: a host runs one command per scanner at a time, so runs
    started together would leave every host to the first of them.
    """

    occurrence: Timestamp
    due_at: Timestamp
    backfill: bool = False
    backfill_id: str | None = None


class ScheduleStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    DISABLED = "disabled"
    COMPLETED = "completed"


class ScheduleState(Contract):
    """Everything the worker keeps about one schedule. `version` grows with every change.

    `cursor`: occurrences at or before it have been dealt with (fired or dropped).
    """

    format: Literal[1] = SCHEDULE_STATE_FORMAT
    version: int = 1
    schedule: Schedule
    enabled: bool = True
    disabled_reason: str | None = None
    disabled_by: str | None = Field(
        default=None, description="Who disabled it: an actor, or `kairos` when it disabled itself."
    )
    paused: bool = False
    pause_note: str | None = None
    cursor: Timestamp
    next_fire_at: Timestamp | None = None
    last_occurrence: Timestamp | None = None
    last_fired_at: Timestamp | None = None
    last_success_at: Timestamp | None = None
    runs: int = Field(default=0, description="Recurrence runs started; max_runs counts these.")
    incarnation: str | None = Field(
        default=None,
        description="The id of the event that created this schedule: a schedule deleted and "
        "created again under the same name is another incarnation, with a history of its own.",
    )
    skipped_runs: int = 0
    succeeded_runs: int = 0
    partially_failed_runs: int = 0
    failed_runs: int = 0
    dropped_occurrences: dict[str, int] = Field(
        default_factory=dict,
        description="Occurrences that came due and did not run, by reason (overlap, missed, "
        "coalesced, excluded, max_runs, already_running): Temporal's num_actions_skipped_overlap "
        "and missed-catch-up counters.",
    )
    consecutive_failures: int = 0
    last_error: str | None = None
    retry: PendingRetry | None = None
    in_flight: tuple[ActiveRun, ...] = ()
    buffered: BufferedRun | None = None
    queued: tuple[QueuedRun, ...] = ()
    recent_event_ids: tuple[str, ...] = ()
    recent_run_keys: tuple[str, ...] = Field(
        default=(), description="No longer written; kept so states stored before still load."
    )
    created_at: Timestamp
    updated_at: Timestamp

    @property
    def retry_at(self) -> datetime | None:
        return self.retry.due_at if self.retry else None


class ScheduleStateChanged(Contract):
    """For a compacted schedule-state topic (key schedule id). `state` None = deleted."""

    schedule_id: str
    version: int
    state: ScheduleState | None
    changed_at: Timestamp


class ScheduleRunRecorded(Contract):
    """On kairos-schedule-runs (key = schedule id): a run fired, was skipped or failed."""

    kind: Literal["schedule.run"] = "schedule.run"
    schedule_id: str
    occurrence: Timestamp
    attempt: int
    reason: str
    outcome: Literal["fired", "skipped", "succeeded", "partially_failed", "failed", "dropped"]
    fired_at: Timestamp
    hosts_matched: int = 0
    commands_issued: int = 0
    error: str | None = None
    incarnation: str | None = None
    commands_succeeded: int = 0
    commands_failed: int = 0
    skip_reason: str | None = Field(
        default=None,
        description="Why a run was skipped (no_host_matched, all_busy, all_maintenance, ...) "
        "or an occurrence dropped (overlap, missed, coalesced, excluded, max_runs...).",
    )
    skipped_hosts: dict[str, int] = Field(
        default_factory=dict, description="Targeted hosts not scanned, by reason."
    )


STATE_UPCASTERS: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
"""format N -> N+1 converters for stored ScheduleState; empty while format 1 is the only one."""


def load_schedule_state(raw: Mapping[str, Any]) -> ScheduleState:
    """A stored ScheduleState of any known format, upcast to the current one.

    Raises ValueError for a format newer than this code knows (decode it at the edge).
    """
    values = dict(raw)
    found = int(values.get("format", SCHEDULE_STATE_FORMAT))
    while found < SCHEDULE_STATE_FORMAT:
        values = dict(STATE_UPCASTERS[found](values))
        found = int(values["format"])
    if found != SCHEDULE_STATE_FORMAT:
        raise ValueError(f"schedule state format {found} is newer than this worker knows")
    return ScheduleState.model_validate(values)
