"""When a schedule's occurrences fall: cron, interval and RRULE in the schedule's timezone.

Every function takes the instant to start from; none reads a clock. Results are UTC.
Calendar arithmetic only, no scheduling decisions: the worker's policy
(`streams.policy.schedules`) and the API's validation and "next fire times" both use it,
which is why it lives beside the clock and not inside either room.

How it works: cron and RRULE are evaluated on naive *wall-clock* times of the schedule's
timezone (croniter and dateutil do no DST arithmetic on naive values), and each wall time is
mapped to UTC instants here, where the DST policy decides what a skipped or repeated wall
time becomes. croniter's own handling of aware datetimes is not used: on the day after a
fall-back it fires "0 2 * * *" at 03:00, and on a spring-forward day "30 2 * * *" at 03:30.

An *occurrence* has a nominal instant `at` (what the recurrence says, after the DST policy)
and a `fire_at`: `at` plus the schedule's jitter, held back to the end of a blackout window.
Occurrence sequences are strictly increasing in `at`.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from croniter import croniter  # type: ignore[import-untyped]
from dateutil.rrule import rrule, rrulestr  # type: ignore[import-untyped]

from schemas.schedules import (
    CronRecurrence,
    DstPolicy,
    ExclusionAction,
    ExclusionWindow,
    IntervalRecurrence,
    NoRecurrence,
    RRuleRecurrence,
    Schedule,
    cron_shape_problem,
    rrule_body,
    rrule_shape_problem,
    timezone_problem,
)

__all__ = [
    "CANDIDATE_BUDGET",
    "Candidate",
    "Occurrence",
    "candidates",
    "cron_problem",
    "exclusion_window_end",
    "jitter_offset",
    "max_fire_delay",
    "next_occurrences",
    "occurrences_between",
    "rrule_problem",
    "schedule_problem",
    "timezone_problem",
]

MAX_DEFER_HOPS = 4
"""A deferred occurrence landing in another window moves on at most this many times."""
CANDIDATE_BUDGET = 10_000
"""Most occurrences one call examines; bounds a call whatever the schedule looks like."""
MAX_OCCURRENCES = 10_000
BLACKED_OUT_HORIZON = timedelta(days=400)
"""Occurrences excluded without a break for this long mean the windows cover them all:
the schedule has no further occurrences (windows last at most 7 days each)."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RRULE_ANCHOR = _EPOCH.replace(tzinfo=None)
_DST_SLACK = timedelta(hours=3)
_CALENDAR_CYCLE_YEARS = 400
"""The Gregorian calendar, weekdays included, repeats exactly every 400 years."""
_SEARCH_HORIZON_YEARS = 30
_ONE_SECOND = timedelta(seconds=1)
_TICK = timedelta(microseconds=1)
_CRON_ERRORS = (ValueError, TypeError, KeyError, IndexError, OverflowError)
"""What croniter raises for bad input or when no match is left (its errors are ValueErrors,
but a few bad inputs surface as the others)."""


@dataclass(frozen=True)
class Occurrence:
    """One occurrence: nominal instant `at` and the instant it runs, `fire_at` (both UTC)."""

    at: datetime
    fire_at: datetime
    deferred: bool = False
    """Held back to the end of a blackout window."""


@dataclass(frozen=True)
class Candidate:
    """An occurrence as the generator sees it: `fire_at` None means an exclusion dropped it."""

    at: datetime
    fire_at: datetime | None
    window_end: datetime | None = None

    def occurrence(self) -> Occurrence:
        assert self.fire_at is not None
        return Occurrence(self.at, self.fire_at, deferred=self.window_end is not None)


# --- validation -----------------------------------------------------------------------


def cron_problem(expression: str) -> str | None:
    """Why `expression` is not a cron expression Kairos can run, quoting it; None if it is."""
    problem = cron_shape_problem(expression)
    if problem:
        return problem
    try:
        rule = croniter(expression, _RRULE_ANCHOR, hash_id="validation")
        rule.get_next(datetime)
    except _CRON_ERRORS as error:
        return f"invalid cron expression {expression!r}: {error}"
    return None


def rrule_problem(rule: str) -> str | None:
    """Why `rule` is not an RRULE Kairos can run, quoting it; None if it is.

    A rule that yields no occurrence within 30 years of its start is refused too: it would
    never (or almost never) run, and searching for it is what makes dateutil slow.
    """
    problem = rrule_shape_problem(rule)
    if problem:
        return problem
    try:
        wall_rule = _RRuleWalls(rule, _RRULE_ANCHOR)
        first = next(wall_rule.forward(_RRULE_ANCHOR - _TICK), None)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as error:
        return f"invalid RRULE {rule!r}: {error}"
    if first is None:
        return f"RRULE {rule!r} never produces an occurrence"
    return None


def schedule_problem(schedule: Schedule) -> str | None:
    """The first reason `schedule` cannot be evaluated (bad cron, RRULE, timezone), or None.

    Pydantic already checked the shape; this checks the meaning with croniter and dateutil.
    The API answers 422 with this text; the worker refuses such an upsert.
    """
    problem = timezone_problem(schedule.timezone)
    recurrences: list[CronRecurrence | RRuleRecurrence | IntervalRecurrence | NoRecurrence] = [
        schedule.recurrence,
        *(window.recurrence for window in schedule.exclusions),
    ]
    for recurrence in recurrences:
        if problem:
            break
        if isinstance(recurrence, CronRecurrence):
            problem = cron_problem(recurrence.expression)
        elif isinstance(recurrence, RRuleRecurrence):
            problem = rrule_problem(recurrence.rule)
    return problem


# --- public evaluation ----------------------------------------------------------------


def next_occurrences(
    schedule: Schedule, after: datetime, *, count: int, runs_so_far: int = 0
) -> list[Occurrence]:
    """Up to `count` occurrences with `at` strictly after `after`, in order.

    Honours start_at (inclusive), end_at (inclusive), max_runs (minus `runs_so_far`), the DST
    policy, exclusion windows and jitter. Fewer come back when the schedule ends, or when
    CANDIDATE_BUDGET occurrences were examined without finding enough.
    """
    limit = min(count, _remaining_runs(schedule, runs_so_far))
    found: list[Occurrence] = []
    for examined, candidate in enumerate(candidates(schedule, after)):
        if len(found) >= limit or examined >= CANDIDATE_BUDGET:
            break
        if candidate.fire_at is not None:
            found.append(candidate.occurrence())
    return found


def occurrences_between(
    schedule: Schedule,
    start: datetime,
    end: datetime,
    *,
    runs_so_far: int = 0,
    limit: int = MAX_OCCURRENCES,
) -> list[Occurrence]:
    """Occurrences with start <= at < end, in order, at most `limit` of them."""
    limit = min(limit, _remaining_runs(schedule, runs_so_far))
    found: list[Occurrence] = []
    for examined, candidate in enumerate(candidates(schedule, start - _TICK)):
        if candidate.at >= end or len(found) >= limit or examined >= CANDIDATE_BUDGET:
            break
        if candidate.fire_at is not None:
            found.append(candidate.occurrence())
    return found


def jitter_offset(schedule_id: str, occurrence: datetime, jitter_seconds: int) -> timedelta:
    """A stable delay in [0, jitter_seconds] for one occurrence of one schedule."""
    if jitter_seconds <= 0:
        return timedelta(0)
    key = f"{schedule_id}/{occurrence.astimezone(UTC).isoformat()}".encode()
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return timedelta(seconds=int.from_bytes(digest, "big") % (jitter_seconds + 1))


def exclusion_window_end(schedule: Schedule, instant: datetime) -> datetime | None:
    """The end of the blackout window that holds `instant` (the latest, if several do)."""
    zone = ZoneInfo(schedule.timezone)
    ends = [
        end
        for window in schedule.exclusions
        if (end := _window_end(window, zone, schedule.id, instant.astimezone(UTC)))
    ]
    return max(ends) if ends else None


def candidates(schedule: Schedule, after: datetime) -> Iterator[Candidate]:
    """Every occurrence with `at` > `after`, including ones an exclusion window dropped.

    The schedule state uses this to move past dropped occurrences; most callers want
    `next_occurrences`. Ignores max_runs; ends after BLACKED_OUT_HORIZON of nothing but
    excluded occurrences. An occurrence held back to a window's end is
    dropped when the next occurrence would fire no later (the latest one held back to a
    window stands for all of them, and a regular occurrence at the window's end for both).
    """
    pending: Candidate | None = None
    blackouts = _Blackouts(schedule)
    excluded_since: datetime | None = None
    for at in _nominal(schedule, after.astimezone(UTC)):
        current = _place(schedule, at, blackouts)
        if current.fire_at is not None:
            excluded_since = None
        elif excluded_since is None:
            excluded_since = at
        elif at - excluded_since > BLACKED_OUT_HORIZON:
            return
        if pending is not None:
            assert pending.fire_at is not None
            superseded = (
                current.window_end is not None and current.window_end == pending.window_end
            ) or (current.fire_at is not None and current.fire_at <= pending.fire_at)
            yield Candidate(pending.at, None, pending.window_end) if superseded else pending
            pending = None
        if current.fire_at is not None and current.window_end is not None:
            pending = current
        else:
            yield current
    if pending is not None:
        yield pending


def max_fire_delay(schedule: Schedule) -> timedelta:
    """An upper bound on fire_at - at: jitter plus the longest chain of deferrals."""
    jitter = timedelta(seconds=schedule.jitter_seconds)
    if not schedule.exclusions or schedule.exclusion_action is ExclusionAction.SKIP:
        return jitter
    longest = max(window.duration for window in schedule.exclusions)
    return jitter + MAX_DEFER_HOPS * (longest + jitter)


# --- placing an occurrence: jitter and exclusion windows --------------------------------


class _Blackouts:
    """The blackout windows of one schedule, asked about mostly increasing instants.

    Remembers, per window, a stretch known to be free of it, so that checking the next
    occurrence usually costs a comparison instead of a cron or RRULE search.
    """

    def __init__(self, schedule: Schedule) -> None:
        self._schedule = schedule
        self._zone = ZoneInfo(schedule.timezone)
        self._free: list[tuple[datetime, datetime] | None] = [None] * len(schedule.exclusions)

    def end_at(self, instant: datetime) -> datetime | None:
        """The latest end of the windows holding `instant`, or None."""
        ends = []
        for index, window in enumerate(self._schedule.exclusions):
            free = self._free[index]
            if free is not None and free[0] <= instant < free[1]:
                continue
            end = _window_end(window, self._zone, self._schedule.id, instant)
            if end is not None:
                ends.append(end)
            else:
                self._free[index] = self._free_stretch(window, instant)
        return max(ends) if ends else None

    def _free_stretch(
        self, window: ExclusionWindow, instant: datetime
    ) -> tuple[datetime, datetime] | None:
        if _dst_slack(instant, self._zone):
            return None  # Near a DST change wall order and instant order may differ.
        walls = _wall_rule(window.recurrence, self._schedule.id, _RRULE_ANCHOR)
        next_wall = next(walls.forward(_wall(instant, self._zone)), None)
        if next_wall is None:
            return (instant, datetime.max.replace(tzinfo=UTC))
        starts = _to_utc(next_wall, self._zone, DstPolicy.RUN_ONCE_SHIFTED, real_time=False)
        if not starts or starts[0] <= instant:
            return None
        return (instant, starts[0])


def _place(schedule: Schedule, at: datetime, blackouts: _Blackouts) -> Candidate:
    jitter = jitter_offset(schedule.id, at, schedule.jitter_seconds)
    fire_at = at + jitter
    if not schedule.exclusions:
        return Candidate(at, fire_at)
    first_end: datetime | None = None
    for _ in range(MAX_DEFER_HOPS):
        end = blackouts.end_at(fire_at)
        if end is None:
            return Candidate(at, fire_at, first_end)
        if schedule.exclusion_action is ExclusionAction.SKIP:
            return Candidate(at, None)
        first_end = first_end or end
        fire_at = end + jitter
    return Candidate(at, None, first_end)


def _window_end(
    window: ExclusionWindow, zone: ZoneInfo, hash_id: str, instant: datetime
) -> datetime | None:
    walls = _wall_rule(window.recurrence, hash_id, _RRULE_ANCHOR)
    wall = _wall(instant, zone)
    slack = _dst_slack(instant, zone)
    floor = wall - window.duration - slack
    for start_wall in walls.backward(wall + slack, floor):
        for start in _to_utc(start_wall, zone, DstPolicy.RUN_ONCE_SHIFTED, real_time=False):
            if start <= instant < start + window.duration:
                return start + window.duration
    return None


# --- nominal instants -------------------------------------------------------------------


def _nominal(schedule: Schedule, after: datetime) -> Iterator[datetime]:
    """Nominal instants > after, >= start_at, <= end_at, strictly increasing (UTC)."""
    lower = after
    if schedule.start_at is not None:
        lower = max(lower, schedule.start_at.astimezone(UTC) - _TICK)
    end = schedule.end_at.astimezone(UTC) if schedule.end_at else None
    recurrence = schedule.recurrence
    if isinstance(recurrence, NoRecurrence):
        return
    if isinstance(recurrence, IntervalRecurrence):
        instants = _interval_instants(recurrence, schedule.start_at, lower)
    else:
        instants = _wall_instants(schedule, recurrence, lower)
    for instant in instants:
        if end is not None and instant > end:
            return
        yield instant


def _interval_instants(
    recurrence: IntervalRecurrence, start_at: datetime | None, lower: datetime
) -> Iterator[datetime]:
    anchor = start_at.astimezone(UTC) if start_at else _EPOCH
    step = recurrence.every
    index = 0 if lower < anchor else (lower - anchor) // step + 1
    while True:
        yield anchor + index * step
        index += 1


def _wall_instants(
    schedule: Schedule, recurrence: CronRecurrence | RRuleRecurrence, lower: datetime
) -> Iterator[datetime]:
    zone = ZoneInfo(schedule.timezone)
    anchor = _wall(schedule.start_at, zone) if schedule.start_at else _RRULE_ANCHOR
    walls = _wall_rule(recurrence, schedule.id, anchor)
    # A DST change may map walls a little before `lower` to instants after it; buffer them
    # in a heap because a repeated hour's second pass comes after later walls' first pass.
    heap: list[datetime] = []
    last: datetime | None = None
    for wall in walls.forward(_wall(lower, zone) - _dst_slack(lower, zone)):
        for instant in _to_utc(wall, zone, schedule.dst_policy, real_time=walls.real_time):
            if instant > lower:
                heapq.heappush(heap, instant)
        # No later wall maps before the earlier of this wall's two readings.
        floor = min(_reading(wall, zone, 0), _reading(wall, zone, 1))
        while heap and heap[0] <= floor:
            instant = heapq.heappop(heap)
            if last is None or instant > last:
                last = instant
                yield instant
    while heap:
        instant = heapq.heappop(heap)
        if last is None or instant > last:
            last = instant
            yield instant


def _dst_slack(instant: datetime, zone: ZoneInfo) -> timedelta:
    """How far wall-clock searches around `instant` must reach back: 0 unless the zone's
    offset changes nearby, where walls before `instant` can map to instants after it."""
    before = (instant - _DST_SLACK).astimezone(zone).utcoffset()
    after = (instant + _DST_SLACK).astimezone(zone).utcoffset()
    return _DST_SLACK if before != after else timedelta(0)


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def _reading(wall: datetime, zone: ZoneInfo, fold: int) -> datetime:
    return wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)


def _to_utc(
    wall: datetime, zone: ZoneInfo, policy: DstPolicy, *, real_time: bool
) -> list[datetime]:
    """The instants at which wall time `wall` in `zone` runs under `policy`."""
    first, second = _reading(wall, zone, 0), _reading(wall, zone, 1)
    if first == second:
        return [first]
    if _wall(first, zone) == wall and _wall(second, zone) == wall:  # Repeated (fall back).
        both = sorted((first, second))
        return both if real_time or policy is DstPolicy.RUN_BOTH else both[:1]
    if real_time or policy is DstPolicy.SKIP:  # Skipped (spring forward).
        return []
    return [_gap_end(min(first, second), max(first, second), zone)]


def _gap_end(low: datetime, high: datetime, zone: ZoneInfo) -> datetime:
    """The instant the clocks jump, in (low, high]: the first wall time after the gap."""
    after_offset = high.astimezone(zone).utcoffset()
    while high - low > _ONE_SECOND:
        middle = low + (high - low) / 2
        middle = middle.replace(microsecond=0)
        if middle <= low:
            break
        if middle.astimezone(zone).utcoffset() == after_offset:
            high = middle
        else:
            low = middle
    return high


# --- wall-clock rules -----------------------------------------------------------------


class _WallRule(Protocol):
    real_time: bool

    def forward(self, wall: datetime) -> Iterator[datetime]:
        """Matching naive wall times strictly after `wall`, ascending."""
        ...

    def backward(self, wall: datetime, floor: datetime) -> Iterator[datetime]:
        """Matching naive wall times in [floor, wall], descending."""
        ...


def _wall_rule(
    recurrence: CronRecurrence | RRuleRecurrence, hash_id: str, anchor: datetime
) -> _WallRule:
    if isinstance(recurrence, CronRecurrence):
        return _CronWalls(recurrence.expression, hash_id)
    return _RRuleWalls(recurrence.rule, anchor)


class _CronWalls:
    def __init__(self, expression: str, hash_id: str) -> None:
        self._expression = expression
        self._hash_id = hash_id
        self.real_time = expression.split()[1].startswith("*")

    def _walker(self, start: datetime) -> croniter:
        # Parsing dominates croniter's cost; copy a parsed one (its tables are read-only).
        walker = copy.copy(_parsed_cron(self._expression, self._hash_id))
        walker.set_current(start, force=True)
        return walker

    def forward(self, wall: datetime) -> Iterator[datetime]:
        walker = self._walker(wall)
        while True:
            try:
                found: datetime = walker.get_next(datetime)
            except _CRON_ERRORS:  # CroniterBadDateError: no match is left.
                return
            if found > wall:
                yield found

    def backward(self, wall: datetime, floor: datetime) -> Iterator[datetime]:
        walker = self._walker(wall + _ONE_SECOND)
        while True:
            try:
                found: datetime = walker.get_prev(datetime)
            except _CRON_ERRORS:
                return
            if found < floor:
                return
            if found <= wall:
                yield found


@functools.lru_cache(maxsize=256)
def _parsed_cron(expression: str, hash_id: str) -> croniter:
    return croniter(expression, _RRULE_ANCHOR, hash_id=hash_id)


class _RRuleWalls:
    """dateutil on naive wall times, kept fast and bounded.

    dateutil iterates period by period from DTSTART and only stops at year 9999, so a rule
    that never matches would loop for minutes. Two shifts keep it bounded: DTSTART moves
    forward by whole periods (same phase), and the whole search moves forward by a multiple
    of 400 years (same calendar) so that year 9999 lies 30-430 years past the start.
    """

    _PERIODS = {"WEEKLY": timedelta(weeks=1), "DAILY": timedelta(days=1)}
    _PERIODS |= {"HOURLY": timedelta(hours=1), "MINUTELY": timedelta(minutes=1)}

    def __init__(self, rule: str, anchor: datetime) -> None:
        self._body = rrule_body(rule)
        self._anchor = anchor.replace(microsecond=0)
        parts = dict(part.split("=", 1) for part in self._body.split(";"))
        self._frequency = parts["FREQ"]
        self._interval = int(parts.get("INTERVAL", "1"))
        self.real_time = self._frequency in ("HOURLY", "MINUTELY")
        self._build(self._anchor)  # Fail now on a bad rule, not on first use.

    def _build(self, dtstart: datetime) -> rrule:
        return rrulestr(self._body, dtstart=dtstart)

    def _start_near(self, wall: datetime) -> datetime:
        """The latest DTSTART <= wall with the anchor's phase (or the anchor itself)."""
        period = self._PERIODS.get(self._frequency)
        if period is None or wall <= self._anchor:
            return self._anchor
        step = period * self._interval
        return self._anchor + ((wall - self._anchor) // step) * step

    @staticmethod
    def _shift(wall: datetime) -> int:
        room = 9999 - _SEARCH_HORIZON_YEARS - wall.year
        return max(0, room // _CALENDAR_CYCLE_YEARS) * _CALENDAR_CYCLE_YEARS

    def forward(self, wall: datetime) -> Iterator[datetime]:
        start = self._start_near(wall)
        years = self._shift(wall)
        shifted = self._build(_add_years(start, years))
        for found in shifted.xafter(_add_years(wall, years), inc=False):
            yield _add_years(found, -years)

    def backward(self, wall: datetime, floor: datetime) -> Iterator[datetime]:
        start = self._start_near(floor)
        years = self._shift(wall)
        shifted = self._build(_add_years(start, years))
        found = shifted.between(_add_years(floor, years), _add_years(wall, years), inc=True)
        for match in reversed(found):
            yield _add_years(match, -years)


def _add_years(wall: datetime, years: int) -> datetime:
    # Whole multiples of 400 years keep February 29th valid.
    return wall.replace(year=wall.year + years) if years else wall


# --- helpers --------------------------------------------------------------------------


def _remaining_runs(schedule: Schedule, runs_so_far: int) -> int:
    if schedule.max_runs is None:
        return MAX_OCCURRENCES
    return max(0, schedule.max_runs - runs_so_far)
