"""The cron dialect Kairos speaks, parsed and evaluated on naive wall-clock times.

Kairos evaluates cron itself rather than through croniter: croniter's results depend on its
version (5.x skips 1 March for `0 0 1,15,30 * *` and fires `59/30` at :00 and :30) and it
reads a one-value range such as `23-23` as the whole field, while faust pins it below 6.
The dialect is described in docs/cron.md; in short:

- 5 fields `minute hour day-of-month month day-of-week`, or 6 with seconds as the last field;
- each field a comma list of `*`, `?` (same as `*`), `N`, `N-M`, `*/S`, `N/S`, `N-M/S`;
  month and weekday names (`jan`, `mon`); weekday 7 is Sunday; `N-N` is the single value N;
- day-of-month `L` (last day); day-of-week `D#k` (k-th weekday D) and `DL` or `LD` (last one);
- `H`, `H(a-b)`, `H/S`, `H(a-b)/S`: a value hashed from the schedule id (croniter's hash);
- day-of-month and day-of-week: when either field starts with `*` or `?` a day must match both,
  otherwise either (Vixie cron's rule).

Everything here is pure; `CronSpec.next_after` and `prev_at_or_before` search at most
`HORIZON_YEARS` ahead or back, so a call is bounded whatever the expression.
"""

from __future__ import annotations

import binascii
import calendar
import functools
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import datetime, timedelta

__all__ = ["HORIZON_YEARS", "CronError", "CronSpec", "parse_cron"]

HORIZON_YEARS = 400
"""The Gregorian calendar, weekdays included, repeats every 400 years: a cron expression
without a match in 400 years never matches."""

_ONE_SECOND = timedelta(seconds=1)
_LAST_WALL = datetime(9999, 12, 31, 23, 59, 58)  # noqa: DTZ001 - a wall time
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_HASH = re.compile(r"^h(\((?P<low>\d+)-(?P<high>\d+)\))?(/(?P<step>\d+))?$")
_NTH = re.compile(r"^(?P<day>[a-z0-9]+)#(?P<nth>\d+)$")
_LAST_WEEKDAY = re.compile(r"^(l(?P<after>[a-z0-9]+)|(?P<before>[a-z0-9]+)l)$")


class CronError(ValueError):
    """A cron expression Kairos cannot run; the message says why."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    hash_index: int
    """croniter's index of the field, part of its hash (kept so `H` lands where it did)."""
    names: tuple[str, ...] = ()
    name_base: int = 0


_SECOND = _Field("second", 0, 59, 5)
_MINUTE = _Field("minute", 0, 59, 0)
_HOUR = _Field("hour", 0, 23, 1)
_DAY = _Field("day-of-month", 1, 31, 2)
_MONTH = _Field("month", 1, 12, 3, _MONTHS, 1)
_WEEKDAY = _Field("day-of-week", 0, 7, 4, _WEEKDAYS, 0)


@dataclass(frozen=True)
class CronSpec:
    """A parsed cron expression: the values each field allows, and the day rule."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: tuple[int, ...]
    weekdays: frozenset[int]
    """0 = Sunday ... 6 = Saturday."""
    last_day: bool = False
    nth_weekdays: frozenset[tuple[int, int]] = frozenset()
    """(weekday, k): the k-th such weekday of the month."""
    last_weekdays: frozenset[int] = frozenset()
    both_days: bool = True
    """A day must match day-of-month and day-of-week (else either)."""
    real_time: bool = False
    """The minute or hour field starts with `*`: such a job follows real time across DST."""
    _month_days: dict[tuple[int, int], tuple[int, ...]] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    # --- search ---------------------------------------------------------------------

    def next_after(self, wall: datetime) -> datetime | None:
        """The first matching wall time strictly after `wall` (None within the horizon)."""
        if wall >= _LAST_WALL:
            return None
        start = wall.replace(microsecond=0) + _ONE_SECOND
        last_year = min(start.year + HORIZON_YEARS, 9999)
        year, from_month = start.year, start.month
        while year <= last_year:
            for month in self.months[bisect_left(self.months, from_month) :]:
                days = self.month_days(year, month)
                same_month = (year, month) == (start.year, start.month)
                first = start.day if same_month else 1
                for day in days[bisect_left(days, first) :]:
                    if same_month and day == start.day:
                        time = self._time_at_or_after(start.hour, start.minute, start.second)
                    else:
                        time = (self.hours[0], self.minutes[0], self.seconds[0])
                    if time is not None:
                        return datetime(year, month, day, *time)  # noqa: DTZ001 - a wall time
            year, from_month = year + 1, 1
        return None

    def prev_at_or_before(self, wall: datetime) -> datetime | None:
        """The last matching wall time at or before `wall` (None within the horizon)."""
        start = wall.replace(microsecond=0)
        first_year = max(start.year - HORIZON_YEARS, 1)
        year, to_month = start.year, start.month
        while year >= first_year:
            for month in reversed(self.months[: bisect_right(self.months, to_month)]):
                days = self.month_days(year, month)
                same_month = (year, month) == (start.year, start.month)
                last = start.day if same_month else 31
                for day in reversed(days[: bisect_right(days, last)]):
                    if same_month and day == start.day:
                        time = self._time_at_or_before(start.hour, start.minute, start.second)
                    else:
                        time = (self.hours[-1], self.minutes[-1], self.seconds[-1])
                    if time is not None:
                        return datetime(year, month, day, *time)  # noqa: DTZ001 - a wall time
            year, to_month = year - 1, 12
        return None

    def month_days(self, year: int, month: int) -> tuple[int, ...]:
        """The days of `month` in `year` that match, ascending."""
        key = (year, month)
        cached = self._month_days.get(key)
        if cached is None:
            if len(self._month_days) > 4096:
                self._month_days.clear()
            cached = self._month_days[key] = self._compute_month_days(year, month)
        return cached

    def _compute_month_days(self, year: int, month: int) -> tuple[int, ...]:
        first_weekday, length = calendar.monthrange(year, month)  # Monday = 0
        first_weekday = (first_weekday + 1) % 7  # Sunday = 0, as cron counts
        found = []
        for day in range(1, length + 1):
            by_date = day in self.days or (self.last_day and day == length)
            weekday = (first_weekday + day - 1) % 7
            by_weekday = (
                weekday in self.weekdays
                or (weekday, (day - 1) // 7 + 1) in self.nth_weekdays
                or (weekday in self.last_weekdays and day + 7 > length)
            )
            if (by_date and by_weekday) if self.both_days else (by_date or by_weekday):
                found.append(day)
        return tuple(found)

    def _time_at_or_after(self, hour: int, minute: int, second: int) -> tuple[int, int, int] | None:
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        i = bisect_left(hours, hour)
        if i < len(hours) and hours[i] == hour:
            j = bisect_left(minutes, minute)
            if j < len(minutes) and minutes[j] == minute:
                k = bisect_left(seconds, second)
                if k < len(seconds):
                    return hour, minute, seconds[k]
                j += 1
            if j < len(minutes):
                return hour, minutes[j], seconds[0]
            i += 1
        if i < len(hours):
            return hours[i], minutes[0], seconds[0]
        return None

    def _time_at_or_before(
        self, hour: int, minute: int, second: int
    ) -> tuple[int, int, int] | None:
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        i = bisect_right(hours, hour) - 1
        if i >= 0 and hours[i] == hour:
            j = bisect_right(minutes, minute) - 1
            if j >= 0 and minutes[j] == minute:
                k = bisect_right(seconds, second) - 1
                if k >= 0:
                    return hour, minute, seconds[k]
                j -= 1
            if j >= 0:
                return hour, minutes[j], seconds[-1]
            i -= 1
        if i >= 0:
            return hours[i], minutes[-1], seconds[-1]
        return None


# --- parsing --------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def parse_cron(expression: str, hash_id: str | None = None) -> CronSpec:
    """Parse `expression`; `hash_id` (the schedule id) is what `H` hashes. Raises CronError."""
    fields = expression.lower().split()
    if len(fields) not in (5, 6):
        raise CronError(f"{len(fields)} fields; expected 5 or 6 (seconds last)")
    minute, hour, day, month, weekday = fields[:5]
    second = fields[5] if len(fields) == 6 else "0"
    # Parsed in the order written, so that the first bad field is the one reported.
    minutes = tuple(sorted(_list(minute, _MINUTE, hash_id)))
    hours = tuple(sorted(_list(hour, _HOUR, hash_id)))
    days: set[int] = set()
    last_day = False
    for item in day.split(","):
        if item == "l":
            last_day = True
        else:
            days |= _values(item, _DAY, hash_id)
    months = tuple(sorted(_list(month, _MONTH, hash_id)))
    weekdays: set[int] = set()
    nth: set[tuple[int, int]] = set()
    last_weekdays: set[int] = set()
    for item in weekday.split(","):
        if match := _NTH.match(item):
            k = int(match["nth"]) if match["nth"].isdigit() else 0
            if not 1 <= k <= 5:
                raise CronError(f"day-of-week {item!r}: the count after '#' must be 1 to 5")
            nth.add((_single(match["day"], _WEEKDAY) % 7, k))
        elif match := _LAST_WEEKDAY.match(item):
            last_weekdays.add(_single(match["after"] or match["before"], _WEEKDAY) % 7)
        else:
            weekdays |= {value % 7 for value in _values(item, _WEEKDAY, hash_id)}
    day_star, weekday_star = day[0] in "*?", weekday[0] in "*?"
    return CronSpec(
        seconds=tuple(sorted(_list(second, _SECOND, hash_id))),
        minutes=minutes,
        hours=hours,
        days=frozenset(days),
        months=months,
        weekdays=frozenset(weekdays),
        last_day=last_day,
        nth_weekdays=frozenset(nth),
        last_weekdays=frozenset(last_weekdays),
        both_days=day_star or weekday_star,
        real_time=minute[0] in "*?" or hour[0] in "*?",
    )


def _list(text: str, spec: _Field, hash_id: str | None) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        values |= _values(item, spec, hash_id)
    return values


def _values(item: str, spec: _Field, hash_id: str | None) -> set[int]:
    """The values one comma-separated item of a field allows."""
    if not item:
        raise CronError(f"{spec.name} has an empty list item")
    if item.startswith("h"):
        return _hashed(item, spec, hash_id)
    body, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit() or int(step_text) < 1:
            raise CronError(f"{spec.name} {item!r}: the step after '/' must be a whole number >= 1")
        step = int(step_text)
    if body in ("*", "?"):
        low, high = spec.low, spec.high
    elif "-" in body:
        first, _, last = body.partition("-")
        low, high = _single(first, spec), _single(last, spec)
        if low > high:
            raise CronError(
                f"{spec.name} range {body!r} runs backwards; "
                f"write '{first}-{spec.high},{spec.low}-{last}' to wrap around"
            )
    else:
        low = _single(body, spec)
        high = spec.high if slash else low  # `N/S` runs to the field's end (weekday 7)
    return set(range(low, high + 1, step))


def _single(text: str, spec: _Field) -> int:
    if text.isdigit():
        value = int(text)
    elif text in spec.names:
        value = spec.names.index(text) + spec.name_base
    else:
        raise CronError(f"{spec.name} value {text!r} is not a number or a name cron knows")
    if not spec.low <= value <= spec.high:
        raise CronError(f"{spec.name} value {value} is out of range {spec.low}-{spec.high}")
    return value


def _hashed(item: str, spec: _Field, hash_id: str | None) -> set[int]:
    """`H` as croniter expands it with the same id, so hashed times stay where they were."""
    match = _HASH.match(item)
    if match is None:
        raise CronError(f"{spec.name} {item!r}: write H, H(a-b), H/step or H(a-b)/step")
    if not hash_id:
        raise CronError(f"{spec.name} {item!r}: H needs the schedule id to hash")
    field_high = 6 if spec is _WEEKDAY else spec.high
    low, high = spec.low, field_high
    if match["low"] is not None:
        low, high = int(match["low"]), int(match["high"])
        if not spec.low <= low < high <= field_high:
            raise CronError(
                f"{spec.name} {item!r}: H's range must go upwards within {spec.low}-{field_high}"
            )
    crc = binascii.crc32(hash_id.encode()) & 0xFFFFFFFF

    def draw(begin: int, end: int) -> int:
        return ((crc >> spec.hash_index) % (end - begin + 1)) + begin

    if match["step"] is None:
        return {draw(low, high)}
    step = int(match["step"])
    if step < 1:
        raise CronError(f"{spec.name} {item!r}: the step after '/' must be >= 1")
    offset = draw(low, min(low + step - 1, high))
    return set(range(offset, high + 1, step))
