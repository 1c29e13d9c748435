"""The global dispatch queue: releases claimed commands under one fleet-wide cap.

Exactly one worker owns the queue at a time (its topic has one partition), so the cap
needs no lock. The queue is plain in-memory data rebuilt from the dispatcher table.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta

from schemas.base import CommandReason
from schemas.commands import ScanCommand
from schemas.internal import DispatchRequested, ReleaseOutcome
from streams.policy.ids import message_id

RECENTLY_RELEASED_KEPT = 100_000
AGED_PRIORITY_CEILING = 10
"""Aging raises a waiting command's rank up to the top priority, never past it: among
commands at the top, the one due earliest goes first."""


@dataclass(frozen=True)
class Issued:
    """A command released to the scanners, with the request it came from."""

    request: DispatchRequested
    command: ScanCommand


def aged_priority(request: DispatchRequested, *, now: datetime, aging_minutes: int) -> int:
    """The rank of a waiting request: its priority plus one step per `aging_minutes` it has
    waited since it was due (0: no aging), at most AGED_PRIORITY_CEILING."""
    if aging_minutes <= 0 or request.priority >= AGED_PRIORITY_CEILING or now <= request.due_at:
        return request.priority
    steps = (now - request.due_at) // timedelta(minutes=aging_minutes)
    return min(request.priority + steps, AGED_PRIORITY_CEILING)


class DispatchQueue:
    """Waiting requests ordered by (priority desc, due asc) and the set in flight.

    With aging, the rank is `aged_priority` instead of the priority, so a low-priority command
    that waits long enough is issued before fresher higher-priority ones. Waiting requests are
    kept in one heap per priority, ordered by due time: within one priority the earliest due
    is also the most aged, so the next command is the best of at most ten heads.

    Idempotent: a request for a command already waiting, in flight or recently released is
    absorbed (a waiting one may be raised in priority), so replays never double-issue.
    """

    def __init__(self) -> None:
        self._waiting: dict[str, DispatchRequested] = {}
        self._levels: dict[int, list[tuple[datetime, int, str]]] = {}
        self._in_flight: dict[str, tuple[DispatchRequested, datetime]] = {}
        self._deadlines: list[tuple[datetime, str]] = []
        self._released: OrderedDict[str, None] = OrderedDict()
        self._sequence = 0

    # --- queries ---
    @property
    def waiting_count(self) -> int:
        return len(self._waiting)

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def in_flight_ids(self) -> set[str]:
        return set(self._in_flight)

    def waiting_request(self, command_id: str) -> DispatchRequested | None:
        """The request of `command_id` if it waits for a slot (at its highest priority asked)."""
        return self._waiting.get(command_id)

    def issued_before_force(self, request: DispatchRequested) -> bool:
        """A force request absorbed because its command went out at its earlier reason, or has
        ended: that command does not meet the force, and the host must be told to scan again.
        (Released commands' reasons are not kept: a force for one is never lost, at worst it
        gives one more scan.)"""
        if request.reason != CommandReason.FORCE:
            return False
        entry = self._in_flight.get(request.command_id)
        if entry is not None:
            return entry[0].reason != CommandReason.FORCE
        return request.command_id in self._released

    def held_for_another_host(self, command_id: str, host_id: str) -> bool:
        """`command_id` waits or is in flight for a host other than `host_id`: a release sent
        again for a result under `host_id`'s key must not free it."""
        entry = self._in_flight.get(command_id)
        request = entry[0] if entry is not None else self._waiting.get(command_id)
        return request is not None and request.host_id != host_id

    def next_deadline(self) -> datetime | None:
        self._drop_stale_deadlines()
        return self._deadlines[0][0] if self._deadlines else None

    # --- changes ---
    def request(self, request: DispatchRequested) -> bool:
        """Queue `request`; False when it was absorbed as a duplicate."""
        command = request.command_id
        if command in self._in_flight or command in self._released:
            return False
        current = self._waiting.get(command)
        if current is not None and current.priority >= request.priority:
            return False
        self._waiting[command] = request
        self._sequence += 1
        level = self._levels.setdefault(request.priority, [])
        heapq.heappush(level, (request.due_at, self._sequence, command))
        return True

    def restore_in_flight(self, request: DispatchRequested, deadline: datetime) -> None:
        """Recovery: a command that was issued before the queue's owner changed."""
        self._waiting.pop(request.command_id, None)
        self._in_flight[request.command_id] = (request, deadline)
        heapq.heappush(self._deadlines, (deadline, request.command_id))

    def restore_released(self, command_id: str) -> None:
        """Recovery: a command released before the queue's owner changed; a late request for
        it is absorbed, as it would have been by the previous owner."""
        self._remember_released(command_id)

    def release(self, command_id: str, outcome: ReleaseOutcome) -> bool:
        """Free the slot of `command_id` (or drop it if still waiting); False if unknown."""
        known = self._in_flight.pop(command_id, None) is not None
        known = self._waiting.pop(command_id, None) is not None or known
        self._remember_released(command_id)
        return known

    def expire(self, now: datetime) -> list[DispatchRequested]:
        """Commands whose deadline has passed: their slots are freed."""
        expired: list[DispatchRequested] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, command = heapq.heappop(self._deadlines)
            entry = self._in_flight.get(command)
            if entry is None or entry[1] != deadline:
                continue
            del self._in_flight[command]
            self._remember_released(command)
            expired.append(entry[0])
        return expired

    def issue(
        self, *, now: datetime, cap: int, timeout: timedelta, aging_minutes: int = 0
    ) -> list[Issued]:
        """Release waiting commands in rank order while fewer than `cap` are in flight.

        The rank is the priority, or with `aging_minutes` > 0 the `aged_priority` at `now`;
        ties go to the earliest due, then to the earliest requested.
        """
        issued: list[Issued] = []
        while len(self._in_flight) < cap:
            command = self._pop_best(now=now, aging_minutes=aging_minutes)
            if command is None:
                break
            request = self._waiting.pop(command)
            deadline = now + timeout
            self._in_flight[command] = (request, deadline)
            heapq.heappush(self._deadlines, (deadline, command))
            issued.append(Issued(request, command_for(request, issued_at=now, deadline=deadline)))
        return issued

    # --- internals ---
    def _pop_best(self, *, now: datetime, aging_minutes: int) -> str | None:
        """Pop the best waiting command of all priority levels; None when none waits."""
        best: tuple[int, datetime, int, int] | None = None
        for priority in list(self._levels):
            head = self._valid_head(priority)
            if head is None:
                continue
            due_at, sequence, command = head
            rank = aged_priority(self._waiting[command], now=now, aging_minutes=aging_minutes)
            candidate = (-rank, due_at, sequence, priority)
            if best is None or candidate < best:
                best = candidate
        if best is None:
            return None
        return heapq.heappop(self._levels[best[3]])[2]

    def _valid_head(self, priority: int) -> tuple[datetime, int, str] | None:
        """The earliest due entry of a level still waiting at that priority; drops stale ones."""
        level = self._levels[priority]
        while level:
            head = level[0]
            request = self._waiting.get(head[2])
            if request is not None and request.priority == priority:
                return head
            heapq.heappop(level)  # Released, or re-queued with a higher priority.
        del self._levels[priority]
        return None

    def _remember_released(self, command_id: str) -> None:
        self._released[command_id] = None
        self._released.move_to_end(command_id)
        while len(self._released) > RECENTLY_RELEASED_KEPT:
            self._released.popitem(last=False)

    def _drop_stale_deadlines(self) -> None:
        while self._deadlines:
            deadline, command = self._deadlines[0]
            entry = self._in_flight.get(command)
            if entry is not None and entry[1] == deadline:
                return
            heapq.heappop(self._deadlines)


def command_for(
    request: DispatchRequested, *, issued_at: datetime, deadline: datetime
) -> ScanCommand:
    """The command a request becomes when issued; the same inputs give the same command."""
    return ScanCommand(
        event_id=message_id("scan-command", request.command_id),
        command_id=request.command_id,
        host_id=request.host_id,
        scanner=request.scanner,
        priority=request.priority,
        reason=request.reason,
        state=request.state,
        due_at=request.due_at,
        issued_at=issued_at,
        deadline=deadline,
        attempt=request.attempt,
        schedule_id=request.schedule_id,
        args=request.args,
    )
