"""When a schedule's occurrences fall: cron, interval and RRULE in the schedule's timezone.

Every function takes the instant to start from; none reads a clock. Results are UTC.
Calendar arithmetic only, no scheduling decisions: the worker's policy
(`streams.policy.schedules`) and the API's validation and "next fire times" both use it,
which is why it lives beside the clock and not inside either room.

How it works: cron (`kairos.floor.cron`, the dialect of docs/cron.md) and RRULE (dateutil) are
evaluated on naive *wall-clock* times of the schedule's timezone, and each wall time is
mapped to UTC instants here, where the DST policy decides what a skipped or repeated wall
time becomes.

An *occurrence* has a nominal instant `at` (what the recurrence says, after the DST policy)
and a `fire_at`: `at` plus the schedule's jitter, held back to the end of a blackout window.
Occurrence sequences are strictly increasing in `at`.

Blackout windows are merged (overlapping or touching windows make one blackout) and jumped
over: the occurrences inside one blackout are never looked at one by one. Only the first
(dropped) and, under `defer`, the last (held back to the blackout's end) are reported. Work
spent on blacked-out time is bounded per call (BLACKOUT_BUDGET); a stream that runs out of it
ends with an `unfinished` candidate rather than looking finished.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from dateutil.rrule import rrule, rrulestr  # type: ignore[import-untyped]

from kairos.floor.cron import CronError, CronSpec, parse_cron
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
BLACKOUT_BUDGET = 32
"""Most window evaluations and blacked-out occurrences one candidate stream spends on
blackouts before it stops with an `unfinished` candidate: bounds a call whatever the windows."""
BLACKED_OUT_HORIZON = timedelta(days=400)
"""A merged blackout is followed at most this far in one go."""
RECUR_HORIZON = timedelta(days=30 * 365)
"""A recurrence must fire within this long of its start, and again within this long."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RRULE_ANCHOR = _EPOCH.replace(tzinfo=None)
_DST_SLACK = timedelta(hours=3)
_CALENDAR_CYCLE_YEARS = 400
"""The Gregorian calendar, weekdays included, repeats exactly every 400 years."""
_SEARCH_HORIZON_YEARS = 30
_ONE_SECOND = timedelta(seconds=1)
_TICK = timedelta(microseconds=1)
_UTC_NAMES = frozenset({"UTC", "Etc/UTC"})
"""Zones read as UTC itself (others with a fixed offset take the general path, also correct)."""
_EVALUATION_ERRORS = (ValueError, TypeError, KeyError, IndexError, OverflowError)
"""What dateutil raises for rules it cannot evaluate (mostly ValueError, some lazily while
iterating); validation refuses such rules, evaluation treats them as having no more matches."""


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
    unfinished: bool = False
    """The stream stops here, inside a blackout, for want of budget: later occurrences exist
    (or may): ask again from `at`. The occurrence at `at` itself is dropped."""

    def occurrence(self) -> Occurrence:
        assert self.fire_at is not None
        return Occurrence(self.at, self.fire_at, deferred=self.window_end is not None)


_AnyRecurrence = CronRecurrence | RRuleRecurrence | IntervalRecurrence | NoRecurrence

# --- validation -----------------------------------------------------------------------


def cron_problem(expression: str, *, hash_id: str | None = None) -> str | None:
    """Why `expression` is not a cron expression Kairos can run, quoting it; None if it is.

    `hash_id` is the schedule id `H` hashes (evaluation uses the same). An expression that
    matches no date in a whole 400-year calendar cycle (30 February) is refused.
    """
    problem = cron_shape_problem(expression)
    if problem:
        return problem
    try:
        spec = parse_cron(expression, hash_id)
    except CronError as error:
        return f"invalid cron expression {expression!r}: {error}"
    if spec.next_after(_RRULE_ANCHOR) is None:
        return f"cron expression {expression!r} never produces an occurrence"
    return None


def rrule_problem(rule: str, *, start: datetime | None = None) -> str | None:
    """Why `rule` is not an RRULE Kairos can run, quoting it; None if it is.

    `start` is DTSTART as a naive wall time (the schedule's start_at in its timezone; the
    epoch when omitted, as for blackout windows). A rule that yields no occurrence within 30
    years of its start is refused too: it would never (or almost never) run, and searching
    for it is what makes dateutil slow.
    """
    problem = rrule_shape_problem(rule)
    if problem:
        return problem
    anchor = _RRULE_ANCHOR if start is None else start
    try:
        wall_rule = _RRuleWalls(rule, anchor, strict=True)
        first = next(wall_rule.forward(anchor - _TICK), None)
    except _EVALUATION_ERRORS as error:
        return f"invalid RRULE {rule!r}: {error}"
    if first is None or first - anchor > RECUR_HORIZON:
        return f"RRULE {rule!r} never produces an occurrence"
    return None


def schedule_problem(schedule: Schedule) -> str | None:
    """The first reason `schedule` cannot be evaluated (bad cron, RRULE, timezone), or None.

    Pydantic already checked the shape; this checks the meaning exactly as evaluation will
    see it: `H` hashed with the schedule's id, an RRULE's DTSTART from start_at in the
    schedule's timezone, and the schedule's own first two occurrences computed by the same
    code the worker runs. A recurrence that never fires, or fires less than once every 30
    years, is refused. The API answers 422 with this text; the worker refuses such an upsert.
    """
    problem = timezone_problem(schedule.timezone)
    if problem:
        return problem
    zone = ZoneInfo(schedule.timezone)
    start = _wall(schedule.start_at, zone) if schedule.start_at else None
    own: list[tuple[_AnyRecurrence, bool]] = [(schedule.recurrence, True)]
    own += [(window.recurrence, False) for window in schedule.exclusions]
    for recurrence, is_own in own:
        if isinstance(recurrence, CronRecurrence):
            problem = cron_problem(recurrence.expression, hash_id=schedule.id)
        elif isinstance(recurrence, RRuleRecurrence):
            problem = rrule_problem(recurrence.rule, start=start if is_own else None)
        if problem:
            return problem
    return _firing_problem(schedule)


def _firing_problem(schedule: Schedule) -> str | None:
    """Whether the schedule's own recurrence, evaluated as the worker will, fires (and again)."""
    recurrence = schedule.recurrence
    if not isinstance(recurrence, CronRecurrence | RRuleRecurrence):
        return None
    text = recurrence.expression if isinstance(recurrence, CronRecurrence) else recurrence.rule
    what = f"{recurrence.kind} {text!r}"
    start = schedule.start_at.astimezone(UTC) if schedule.start_at else _EPOCH
    try:
        instants = _wall_instants(schedule, recurrence, start - _TICK)
        first = next(instants, None)
        second = next(instants, None) if first is not None else None
    except _EVALUATION_ERRORS as error:
        return f"{what} cannot be evaluated from the schedule's start: {error}"
    if first is None or first - start > RECUR_HORIZON:
        return f"{what} never produces an occurrence after the schedule's start"
    if second is None or second - first > RECUR_HORIZON:
        return f"{what} fires less than once every 30 years"
    return None


# --- public evaluation ----------------------------------------------------------------


def next_occurrences(
    schedule: Schedule, after: datetime, *, count: int, runs_so_far: int = 0
) -> list[Occurrence]:
    """Up to `count` occurrences with `at` strictly after `after`, in order.

    Honours start_at (inclusive), end_at (inclusive), max_runs (minus `runs_so_far`), the DST
    policy, exclusion windows and jitter. Fewer come back when the schedule ends, or when
    CANDIDATE_BUDGET occurrences (or BLACKOUT_BUDGET of blackout work) were examined without
    finding enough.
    """
    limit = min(count, _remaining_runs(schedule, runs_so_far))
    found: list[Occurrence] = []
    for examined, candidate in enumerate(candidates(schedule, after)):
        if len(found) >= limit or examined >= CANDIDATE_BUDGET or candidate.unfinished:
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
        if candidate.unfinished:
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
    """Every occurrence with `at` > `after` that the schedule state must account for.

    Includes occurrences an exclusion window dropped, except inside a blackout (merged
    windows), which is jumped over: its first occurrence comes as dropped and, under
    `defer`, its last one is held back to the blackout's end (the latest one held back stands
    for all of them); the others are never examined. A held-back occurrence is dropped when
    the next occurrence would fire no later. Ignores max_runs. Ends when the recurrence ends,
    or, after BLACKOUT_BUDGET of blackout work, with an `unfinished` candidate: the schedule
    is not over, the caller asks again later from that candidate's `at`.
    """
    pending: Candidate | None = None
    blackouts = _Blackouts(schedule)
    budget = _Budget(BLACKOUT_BUDGET)
    lower = after.astimezone(UTC)
    while True:
        jump_to: datetime | None = None
        for at in _nominal(schedule, lower):
            placed = _place(schedule, at, blackouts, budget)
            for current in placed.candidates:
                if pending is not None:
                    assert pending.fire_at is not None
                    superseded = (
                        current.window_end is not None and current.window_end == pending.window_end
                    ) or (current.fire_at is not None and current.fire_at <= pending.fire_at)
                    yield Candidate(pending.at, None, pending.window_end) if superseded else pending
                    pending = None
                if current.unfinished:
                    yield current
                    return
                if current.fire_at is not None and current.window_end is not None:
                    pending = current
                else:
                    yield current
            if placed.resume_at is not None:
                jump_to = placed.resume_at
                break
        if jump_to is None:
            break
        lower = jump_to - _TICK
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


class _Budget:
    """Blackout work one candidate stream may still spend."""

    def __init__(self, units: int) -> None:
        self.left = units

    def spend(self, units: int = 1) -> None:
        self.left -= units

    @property
    def exhausted(self) -> bool:
        return self.left <= 0


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

    def run_end(self, instant: datetime, budget: _Budget) -> tuple[datetime, bool] | None:
        """The end of the blackout holding `instant` (windows that overlap or touch merged),
        and whether that end was reached (False: still blacked out there, out of budget or
        past BLACKED_OUT_HORIZON); None when no window holds `instant`."""
        end = self.end_at(instant)
        if end is None:
            return None
        while True:
            if budget.exhausted or end - instant > BLACKED_OUT_HORIZON:
                return end, False
            budget.spend(max(1, len(self._schedule.exclusions)))
            further = self.end_at(end)
            if further is None or further <= end:
                return end, True
            end = further

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


@dataclass(frozen=True)
class _Placed:
    """What one nominal instant turned into, and where the nominal search goes on from."""

    candidates: tuple[Candidate, ...]
    resume_at: datetime | None = None
    """Jump: the next nominal instant to consider is the first at or after this."""


def _place(schedule: Schedule, at: datetime, blackouts: _Blackouts, budget: _Budget) -> _Placed:
    jitter = jitter_offset(schedule.id, at, schedule.jitter_seconds)
    if not schedule.exclusions:
        return _Placed((Candidate(at, at + jitter),))
    blackout = blackouts.run_end(at, budget)
    if blackout is not None:
        return _place_blackout(schedule, at, blackout, blackouts, budget)
    # `at` is free, but jitter may carry the run into a blackout.
    first_end: datetime | None = None
    fire_at = at + jitter
    for _ in range(MAX_DEFER_HOPS):
        held = blackouts.run_end(fire_at, budget)
        if held is None:
            return _Placed((Candidate(at, fire_at, first_end),))
        budget.spend()
        if schedule.exclusion_action is ExclusionAction.SKIP:
            return _Placed((Candidate(at, None),))
        first_end = first_end or held[0]
        fire_at = held[0] + jitter
    return _Placed((Candidate(at, None, first_end),))


def _place_blackout(
    schedule: Schedule,
    at: datetime,
    blackout: tuple[datetime, bool],
    blackouts: _Blackouts,
    budget: _Budget,
) -> _Placed:
    """`at` lies in a blackout ending at `end`: report its first and last occurrences, jump."""
    end, reached = blackout
    budget.spend()
    last = _last_nominal_before(schedule, at, end) or at
    if not reached or budget.exhausted:
        # Out of budget: stop at the last occurrence known to be blacked out.
        before = (Candidate(at, None, end),) if last > at else ()
        return _Placed((*before, Candidate(last, None, end, unfinished=True)))
    if schedule.exclusion_action is ExclusionAction.SKIP:
        dropped: tuple[Candidate, ...] = (
            (Candidate(at, None),) if last == at else (Candidate(at, None), Candidate(last, None))
        )
        return _Placed(dropped, resume_at=end)
    jitter = jitter_offset(schedule.id, last, schedule.jitter_seconds)
    fire_at: datetime | None = end + jitter
    for _ in range(MAX_DEFER_HOPS):
        assert fire_at is not None
        held = blackouts.run_end(fire_at, budget)
        if held is None:
            break
        budget.spend()
        fire_at = held[0] + jitter
    else:
        fire_at = None
    first = (Candidate(at, None, end),) if last > at else ()
    return _Placed((*first, Candidate(last, fire_at, end)), resume_at=end)


def _window_end(
    window: ExclusionWindow, zone: ZoneInfo, hash_id: str, instant: datetime
) -> datetime | None:
    """The end of the window of this recurrence that holds `instant` and ends last, or None.

    Windows of one recurrence all last as long, so the latest start at or before `instant`
    decides; near a DST change a few more starts are read (wall and instant order differ).
    """
    walls = _wall_rule(window.recurrence, hash_id, _RRULE_ANCHOR)
    wall = _wall(instant, zone)
    slack = _dst_slack(instant, zone)
    floor = wall - window.duration - slack
    best: datetime | None = None
    for start_wall in walls.backward(wall + slack, floor):
        for start in _to_utc(start_wall, zone, DstPolicy.RUN_ONCE_SHIFTED, real_time=False):
            if start <= instant < start + window.duration:
                end = start + window.duration
                best = end if best is None or end > best else best
        if best is not None and (not slack or start_wall < wall - slack):
            break
    return best


def _last_nominal_before(schedule: Schedule, low: datetime, high: datetime) -> datetime | None:
    """The latest nominal instant in [low, high) (`low` is itself a nominal instant).

    Read with the forward search itself over growing spans that end at `high`, so that it is
    by construction the instant the forward search would have reached last (DST included).
    """
    span = timedelta(seconds=2)
    while True:
        start = max(low, high - span)
        last: datetime | None = None
        for instant in _nominal(schedule, start - _TICK):
            if instant >= high:
                break
            last = instant
        if last is not None or start <= low:
            return last
        span *= 30


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
    if schedule.timezone in _UTC_NAMES:
        # No clock change ever: every wall time is its own instant, none repeated or
        # skipped. The general path below costs several conversions per instant, a large
        # share of a frequent cron schedule's due check.
        for wall in walls.forward(lower.astimezone(UTC).replace(tzinfo=None)):
            yield wall.replace(tzinfo=UTC)
        return
    policy = schedule.dst_policy
    last: datetime | None = None
    ahead = _instants_from(walls, zone, policy, lower)
    for instant in heapq.merge(ahead, _repeated_before(walls, zone, policy, lower)):
        if last is None or instant > last:
            last = instant
            yield instant


def _instants_from(
    walls: _WallRule, zone: ZoneInfo, policy: DstPolicy, lower: datetime
) -> Iterator[datetime]:
    """Instants > lower of the walls after `lower`'s own wall, ascending (maybe repeated)."""
    # A repeated hour's second pass comes after later walls' first pass: buffer in a heap.
    heap: list[datetime] = []
    for wall in walls.forward(_wall(lower, zone)):
        for instant in _to_utc(wall, zone, policy, real_time=walls.real_time):
            if instant > lower:
                heapq.heappush(heap, instant)
        # No later wall maps before the earlier of this wall's two readings.
        floor = min(_reading(wall, zone, 0), _reading(wall, zone, 1))
        while heap and heap[0] <= floor:
            yield heapq.heappop(heap)
    while heap:
        yield heapq.heappop(heap)


def _repeated_before(
    walls: _WallRule, zone: ZoneInfo, policy: DstPolicy, lower: datetime
) -> Iterator[datetime]:
    """Instants > lower of walls up to `lower`'s own: the second pass of an hour that the
    clocks are about to repeat, when `lower` lies in its first pass. Read lazily: a
    per-second schedule has thousands of them, needed only once the first pass is over."""
    high = lower + _DST_SLACK
    before, after = lower.astimezone(zone).utcoffset(), high.astimezone(zone).utcoffset()
    if before is None or after is None or after >= before:
        return  # No fall-back ahead.
    change = _gap_end(lower, high, zone)  # The first instant on the new offset.
    first, own = _wall(change, zone), _wall(lower, zone)
    if first > own:
        return
    for wall in walls.forward(first - _TICK):
        if wall > own:
            return
        for instant in _to_utc(wall, zone, policy, real_time=walls.real_time):
            if instant > lower:
                yield instant


def _dst_slack(instant: datetime, zone: ZoneInfo) -> timedelta:
    """How far wall-clock searches around `instant` must reach back: 0 unless the zone's
    offset changes nearby, where walls before `instant` can map to instants after it: as far
    as the clocks go back (a repeated hour's second pass), plus a minute."""
    before = (instant - _DST_SLACK).astimezone(zone).utcoffset()
    after = (instant + _DST_SLACK).astimezone(zone).utcoffset()
    if before is None or after is None or before == after:
        return timedelta(0)
    return min(abs(after - before) + timedelta(minutes=1), _DST_SLACK)


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
        try:
            self._spec: CronSpec | None = parse_cron(expression, hash_id)
        except CronError:
            self._spec = None  # Validation refuses it; evaluation finds no match.
        self.real_time = self._spec.real_time if self._spec else False

    def forward(self, wall: datetime) -> Iterator[datetime]:
        found: datetime | None = wall
        while self._spec is not None and found is not None:
            found = self._spec.next_after(found)
            if found is not None:
                yield found

    def backward(self, wall: datetime, floor: datetime) -> Iterator[datetime]:
        found: datetime | None = wall
        while self._spec is not None and found is not None:
            found = self._spec.prev_at_or_before(found)
            if found is None or found < floor:
                return
            yield found
            found -= _ONE_SECOND


class _RRuleWalls:
    """dateutil on naive wall times, kept fast and bounded.

    dateutil iterates period by period from DTSTART and only stops at year 9999, so a rule
    that never matches would loop for minutes. Two shifts keep it bounded: DTSTART moves
    forward by whole periods (same phase), and the whole search moves forward by a multiple
    of 400 years (same calendar) so that year 9999 lies 30-430 years past the start.
    Backward searches read growing spans, latest first, so that finding the latest start of
    a minutely window does not list a week of them.

    With `strict` a rule dateutil cannot evaluate raises (validation); without, it simply
    has no (more) matches, so evaluation never raises.
    """

    _PERIODS = {"WEEKLY": timedelta(weeks=1), "DAILY": timedelta(days=1)}
    _PERIODS |= {"HOURLY": timedelta(hours=1), "MINUTELY": timedelta(minutes=1)}

    def __init__(self, rule: str, anchor: datetime, *, strict: bool = False) -> None:
        self._body = rrule_body(rule)
        self._anchor = anchor.replace(microsecond=0)
        parts = dict(part.split("=", 1) for part in self._body.split(";"))
        self._frequency = parts.get("FREQ", "")
        self._interval = int(parts["INTERVAL"]) if parts.get("INTERVAL", "").isdigit() else 1
        self.real_time = self._frequency in ("HOURLY", "MINUTELY")
        self._days = self._day_rule(parts)
        self._strict = strict
        self._broken = False
        try:
            self._build(self._anchor)  # Fail now on a bad rule, not on first use.
        except _EVALUATION_ERRORS:
            if strict:
                raise
            self._broken = True

    def _build(self, dtstart: datetime) -> rrule:
        return rrulestr(self._body, dtstart=dtstart)

    _DAY_PARTS = ("BYMONTH", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO", "BYDAY", "WKST")

    def _day_rule(self, parts: dict[str, str]) -> str | None:
        """For a daily or finer rule that filters days, a yearly rule listing those days.

        dateutil walks a daily or finer rule day by day, also over days its filters refuse
        (a rule for 29 February walks four years of them): the yearly rule finds the first
        day that can match at once, and the search starts there.
        """
        if self._frequency not in ("DAILY", "HOURLY", "MINUTELY"):
            return None
        days = {name: parts[name] for name in self._DAY_PARTS if name in parts}
        if set(days) <= {"WKST"}:
            return None
        if "BYDAY" in days:  # dateutil ignores `-1FR`'s position below MONTHLY: plain FR.
            days["BYDAY"] = ",".join(sorted({item[-2:] for item in days["BYDAY"].split(",")}))
        if set(days) <= {"BYMONTH", "WKST"}:
            days["BYMONTHDAY"] = ",".join(str(day) for day in range(1, 32))
        fields = ";".join(f"{name}={value}" for name, value in days.items())
        return f"FREQ=YEARLY;{fields};BYHOUR=0;BYMINUTE=0;BYSECOND=0"

    def _first_day(self, wall: datetime, years: int) -> datetime | None:
        """The start of the first day on or after `wall`'s day that the day filters allow."""
        assert self._days is not None
        day = wall.replace(hour=0, minute=0, second=0, microsecond=0)
        days = rrulestr(self._days, dtstart=_add_years(day, years))
        found = days.after(_add_years(day, years), inc=True)
        return None if found is None else _add_years(found, -years)

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
        if self._broken:
            return
        try:
            years = self._shift(wall)
            if self._days is not None:
                day = self._first_day(wall, years)
                if day is None:
                    return
                wall = max(wall, day - _TICK)
            start = self._start_near(wall)
            shifted = self._build(_add_years(start, years))
            for found in shifted.xafter(_add_years(wall, years), inc=False):
                yield _add_years(found, -years)
        except _EVALUATION_ERRORS:
            if self._strict:
                raise

    def backward(self, wall: datetime, floor: datetime) -> Iterator[datetime]:
        if self._broken:
            return
        try:
            yield from self._backward(wall, floor)
        except _EVALUATION_ERRORS:
            if self._strict:
                raise

    def _backward(self, wall: datetime, floor: datetime) -> Iterator[datetime]:
        years = self._shift(wall)
        period = self._PERIODS.get(self._frequency, timedelta(days=1))
        high, span = wall, 2 * period * self._interval
        while True:
            low = max(floor, high - span)
            span *= 32
            shifted = self._build(_add_years(self._start_near(low), years))
            found = shifted.between(_add_years(low, years), _add_years(high, years), inc=True)
            for match in reversed(found):
                match = _add_years(match, -years)
                if match < high or high == wall:
                    yield match
            if low <= floor:
                return
            high = low


def _add_years(wall: datetime, years: int) -> datetime:
    # Whole multiples of 400 years keep February 29th valid.
    return wall.replace(year=wall.year + years) if years else wall


# --- helpers --------------------------------------------------------------------------


def _remaining_runs(schedule: Schedule, runs_so_far: int) -> int:
    if schedule.max_runs is None:
        return MAX_OCCURRENCES
    return max(0, schedule.max_runs - runs_so_far)
