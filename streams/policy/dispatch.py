"""The global dispatch queue: releases claimed commands under one fleet-wide cap, shares
them fairly between organizations, and puts first the hosts about to break their promise.

Exactly one worker owns the queue at a time (its topic has one partition), so the cap
needs no lock. The queue is plain in-memory data rebuilt from the dispatcher table.
"""

from __future__ import annotations

import heapq
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping
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
NO_ORGANIZATION = ""
"""The share of commands whose request names no organization (generic schedules')."""
GUARDED = -1
"""`_pop_best`'s source for a command taken from the promise heads."""

PROMISE_HEAPS_SLACK = 10_000
"""Promise entries left behind by issued commands before the promise heaps are rebuilt."""
_Entry = tuple[datetime, int, str]
"""(due_at or promise_at, sequence, command_id): the sequence breaks ties by request order."""


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


class _Level:
    """The waiting commands of one priority: per organization a heap by due time, and the
    organizations in turn (round-robin). An organization is in `turn` while it has a heap."""

    __slots__ = ("heaps", "turn")

    def __init__(self) -> None:
        self.heaps: dict[str, list[_Entry]] = {}
        self.turn: deque[str] = deque()

    def push(self, organization: str, entry: _Entry) -> None:
        heap = self.heaps.get(organization)
        if heap is None:
            heap = self.heaps[organization] = []
            self.turn.append(organization)
        heapq.heappush(heap, entry)

    def candidate(
        self,
        priority: int,
        skipped: _Skipped,
        waiting: Mapping[str, DispatchRequested],
    ) -> tuple[_Entry, str] | None:
        """The earliest due command of the organization whose turn it is at `priority`;
        organizations with nothing left lose their turn, those at their cap are skipped."""
        turn = self.turn
        while turn:
            organization = turn[0]
            head = self._valid_head(organization, priority, waiting)
            if head is None:
                turn.popleft()
                del self.heaps[organization]
                continue
            if skipped.full(organization):
                turn.popleft()
                skipped.levels.append((priority, organization))
                continue
            return head, organization
        return None

    def _valid_head(
        self, organization: str, priority: int, waiting: Mapping[str, DispatchRequested]
    ) -> _Entry | None:
        """The earliest due entry still waiting at that priority and organization; drops
        stale ones (released, issued, or asked again at a higher priority)."""
        heap = self.heaps[organization]
        while heap:
            head = heap[0]
            request = waiting.get(head[2])
            if (
                request is not None
                and request.priority == priority
                and share_of(request) == organization
            ):
                return head
            heapq.heappop(heap)
        return None


class _Promises:
    """The waiting commands with a promise: per share a heap ordered by `promise_at`, and a
    heap of those heaps' heads. Entries are dropped lazily: `waiting` says which still hold."""

    __slots__ = ("heads", "heaps", "pushes")

    def __init__(self) -> None:
        self.heaps: dict[str, list[_Entry]] = {}
        self.heads: list[tuple[datetime, str]] = []
        self.pushes = 0
        """Entries pushed since the heaps were last rebuilt."""

    def push(self, share: str, entry: _Entry) -> None:
        promises = self.heaps.setdefault(share, [])
        heapq.heappush(promises, entry)
        self.pushes += 1
        if promises[0] is entry:
            heapq.heappush(self.heads, (entry[0], share))

    def pop(self, share: str) -> str:
        return heapq.heappop(self.heaps[share])[2]

    def candidate(
        self,
        horizon: datetime,
        skipped: _Skipped,
        waiting: Mapping[str, DispatchRequested],
    ) -> tuple[_Entry, str] | None:
        """The waiting command with the earliest `promise_at` at or before `horizon`, of an
        organization below its cap."""
        heads = self.heads
        while heads:
            promise_at, organization = heads[0]
            if promise_at > horizon:
                return None
            head = self._valid_head(organization, waiting)
            if head is None or head[0] != promise_at:
                heapq.heappop(heads)  # Stale: the organization's head has moved on.
                if head is not None:
                    heapq.heappush(heads, (head[0], organization))
                continue
            if skipped.full(organization):
                skipped.promises.append(heapq.heappop(heads))
                continue
            return head, organization
        return None

    def _valid_head(
        self, organization: str, waiting: Mapping[str, DispatchRequested]
    ) -> _Entry | None:
        heap = self.heaps.get(organization)
        if heap is None:
            return None
        while heap:
            head = heap[0]
            request = waiting.get(head[2])
            if (
                request is not None
                and request.promise_at == head[0]
                and share_of(request) == organization
            ):
                return head
            heapq.heappop(heap)
        del self.heaps[organization]
        return None


class DispatchQueue:
    """Waiting requests in rank order, the set in flight, and the count in flight per
    organization.

    The rank, best first:

    1. with the promise guard on (`promise_guard_minutes` > 0), commands asked at the top
       priority (a force, a host never scanned) — with it off they rank as in 3;
    2. commands whose host breaks its scan-interval promise (`promise_at`) within the guard,
       earliest promise first (earliest-deadline-first meets every deadline that can be met);
    3. the others by priority (with `aging_minutes` > 0, `aged_priority`), then due time.

    Commands of equal priority are shared round-robin between shares, a share being one
    scanner's commands for one organization (`share_of`): each share with commands waiting at
    a priority gets one in turn, its earliest due, so one organization's backlog cannot
    starve another's few. With `org_cap`, an organization with that many commands in flight
    gets no more until one ends. A scanner's commands without an organization (generic
    schedules') take one turn together and have no organization cap.

    Waiting requests are kept in one heap per (priority, share) ordered by due time, with a
    turn per priority, and in one heap per share ordered by `promise_at`, with a heap of
    those heaps' heads: the next command is the best of at most ten turns and one guarded
    head, so `issue` costs O(issued × levels × log) plus shares skipped at a cap. Entries
    are dropped lazily when their command has gone or been raised.

    Idempotent: a request for a command already waiting, in flight or recently released is
    absorbed (a waiting one may be raised in priority), so replays never double-issue.
    """

    def __init__(self) -> None:
        self._waiting: dict[str, DispatchRequested] = {}
        self._levels: dict[int, _Level] = {}
        self._promises = _Promises()
        self._in_flight: dict[str, tuple[DispatchRequested, datetime]] = {}
        self._in_flight_by_organization: Counter[str] = Counter()
        self._in_flight_by_scanner: Counter[str] = Counter()
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

    def in_flight_for(self, organization: str | None) -> int:
        """Commands in flight for hosts of `organization` (None: without one)."""
        return self._in_flight_by_organization[organization or NO_ORGANIZATION]

    def in_flight_for_scanner(self, scanner: str) -> int:
        """Commands in flight of `scanner`'s pool."""
        return self._in_flight_by_scanner[scanner]

    def waiting_by_scanner(self) -> Counter[str]:
        """Commands waiting, per scanner."""
        return Counter(request.scanner for request in self._waiting.values())

    def is_in_flight(self, command_id: str) -> bool:
        return command_id in self._in_flight

    def was_released(self, command_id: str) -> bool:
        """`command_id` ended (or was dropped) recently enough to be remembered."""
        return command_id in self._released

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
        organization = share_of(request)
        level = self._levels.get(request.priority)
        if level is None:
            level = self._levels[request.priority] = _Level()
        level.push(organization, (request.due_at, self._sequence, command))
        if request.promise_at is not None:
            self._promises.push(organization, (request.promise_at, self._sequence, command))
        return True

    def restore_in_flight(self, request: DispatchRequested, deadline: datetime) -> None:
        """Recovery: a command that was issued before the queue's owner changed."""
        self._waiting.pop(request.command_id, None)
        self._end_in_flight(request.command_id)
        self._start_in_flight(request, deadline)

    def restore_released(self, command_id: str) -> None:
        """Recovery: a command released before the queue's owner changed; a late request for
        it is absorbed, as it would have been by the previous owner."""
        self._remember_released(command_id)

    def release(self, command_id: str, outcome: ReleaseOutcome) -> bool:
        """Free the slot of `command_id` (or drop it if still waiting); False if unknown."""
        known = self._end_in_flight(command_id) is not None
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
            self._end_in_flight(command)
            self._remember_released(command)
            expired.append(entry[0])
        return expired

    def issue(
        self,
        *,
        now: datetime,
        cap: int,
        timeout: timedelta,
        aging_minutes: int = 0,
        org_cap: int | None = None,
        promise_guard_minutes: int = 0,
        pools: Mapping[str, int] | None = None,
        timeouts: Mapping[str, timedelta] | None = None,
    ) -> list[Issued]:
        """Release waiting commands in rank order while fewer than `cap` are in flight.

        The rank is the class docstring's; ties go to the organization whose turn it is, then
        to the earliest due, then to the earliest requested. `org_cap` (None or 0: off)
        bounds each organization's commands in flight; `promise_guard_minutes` (0: off) is
        how close to its `promise_at` a command outranks every ordinary priority.

        `pools` bounds each named scanner's commands in flight (0: the scanner is inactive,
        its commands are held); a scanner it does not name has the fleet-wide `cap` only.
        `timeouts` gives a scanner's commands their deadline; `timeout` is the others'.
        """
        issued: list[Issued] = []
        horizon = now + timedelta(minutes=promise_guard_minutes) if promise_guard_minutes else None
        skipped = _Skipped(
            org_cap or None,
            pools or {},
            self._in_flight_by_organization,
            self._in_flight_by_scanner,
        )
        if self._promises.pushes > 2 * len(self._waiting) + PROMISE_HEAPS_SLACK:
            self._rebuild_promises()
        try:
            while len(self._in_flight) < cap:
                command = self._pop_best(
                    now=now, aging_minutes=aging_minutes, horizon=horizon, skipped=skipped
                )
                if command is None:
                    break
                request = self._waiting.pop(command)
                deadline = now + (timeouts or {}).get(request.scanner, timeout)
                self._start_in_flight(request, deadline)
                issued.append(
                    Issued(request, command_for(request, issued_at=now, deadline=deadline))
                )
        finally:
            skipped.restore(self._levels, self._promises)
        return issued

    # --- internals ---
    def _pop_best(
        self,
        *,
        now: datetime,
        aging_minutes: int,
        horizon: datetime | None,
        skipped: _Skipped,
    ) -> str | None:
        """Pop the best waiting command of the guarded heads and every priority's turn; None
        when none waits (or every one waiting is of an organization at its cap)."""
        best: tuple[int, int, datetime, int] | None = None
        source: int | None = None
        """The priority the best comes from; GUARDED: the promise heads."""
        organization = NO_ORGANIZATION
        for priority in list(self._levels):
            candidate = self._level_candidate(priority, skipped)
            if candidate is None:
                continue
            (due_at, sequence, command), owner = candidate
            top_first = horizon is not None and priority >= AGED_PRIORITY_CEILING
            rank = aged_priority(self._waiting[command], now=now, aging_minutes=aging_minutes)
            key = (0 if top_first else 2, -rank, due_at, sequence)
            if best is None or key < best:
                best, source, organization = key, priority, owner
        if horizon is not None:
            guarded = self._promises.candidate(horizon, skipped, self._waiting)
            if guarded is not None:
                (promise_at, sequence, command), owner = guarded
                key = (1, 0, promise_at, sequence)
                if best is None or key < best:
                    best, source, organization = key, GUARDED, owner
        if source is None:
            return None
        if source == GUARDED:
            return self._promises.pop(organization)
        level = self._levels[source]
        command = heapq.heappop(level.heaps[organization])[2]
        level.turn.popleft()  # The organization served had the turn: it goes to the back.
        level.turn.append(organization)
        return command

    def _level_candidate(self, priority: int, skipped: _Skipped) -> tuple[_Entry, str] | None:
        """The candidate of `priority`'s turn (`_Level.candidate`); a level left without
        waiting commands is dropped."""
        level = self._levels[priority]
        candidate = level.candidate(priority, skipped, self._waiting)
        if candidate is None and not level.heaps:
            del self._levels[priority]
        return candidate

    def _rebuild_promises(self) -> None:
        """The promise heaps from the waiting commands alone. A command issued in its
        priority's turn leaves its promise entry behind until that entry reaches the top, up
        to two days later (or never, with the guard off): rebuilt once the entries pushed
        outnumber twice those waiting, they stay O(waiting) at an amortized O(log waiting) a
        request."""
        self._promises = _Promises()
        for command, request in self._waiting.items():
            if request.promise_at is not None:
                self._sequence += 1
                entry = (request.promise_at, self._sequence, command)
                self._promises.push(share_of(request), entry)

    def _start_in_flight(self, request: DispatchRequested, deadline: datetime) -> None:
        self._in_flight[request.command_id] = (request, deadline)
        self._in_flight_by_organization[organization_of(request)] += 1
        self._in_flight_by_scanner[request.scanner] += 1
        heapq.heappush(self._deadlines, (deadline, request.command_id))

    def _end_in_flight(self, command_id: str) -> DispatchRequested | None:
        entry = self._in_flight.pop(command_id, None)
        if entry is None:
            return None
        for counts, key in (
            (self._in_flight_by_organization, organization_of(entry[0])),
            (self._in_flight_by_scanner, entry[0].scanner),
        ):
            counts[key] -= 1
            if counts[key] <= 0:
                del counts[key]
        return entry[0]

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


class _Skipped:
    """Organizations passed over in one `issue` because they are at their cap: none of their
    commands ends during the pass, so each is skipped once per turn it holds."""

    __slots__ = ("by_organization", "by_scanner", "cap", "levels", "pools", "promises")

    def __init__(
        self,
        cap: int | None,
        pools: Mapping[str, int],
        by_organization: Counter[str],
        by_scanner: Counter[str],
    ) -> None:
        self.cap = cap
        self.pools = pools
        self.by_organization = by_organization
        """The queue's commands in flight per organization and per scanner (live counts)."""
        self.by_scanner = by_scanner
        self.levels: list[tuple[int, str]] = []
        self.promises: list[tuple[datetime, str]] = []

    def full(self, share: str) -> bool:
        """The share's scanner pool is full (or the scanner inactive), or its organization is
        at its cap."""
        scanner, _, organization = share.partition(SHARE_SEPARATOR)
        pool = self.pools.get(scanner)
        if pool is not None and self.by_scanner[scanner] >= pool:
            return True
        cap = self.cap
        return (
            cap is not None
            and organization != NO_ORGANIZATION
            and self.by_organization[organization] >= cap
        )

    def restore(self, levels: dict[int, _Level], promises: _Promises) -> None:
        """Organizations skipped at their cap keep their place for the next pass."""
        for priority, organization in reversed(self.levels):
            level = levels.get(priority)
            if level is None:
                level = levels[priority] = _Level()
            if organization in level.heaps:
                level.turn.appendleft(organization)
        for head in self.promises:
            heapq.heappush(promises.heads, head)


SHARE_SEPARATOR = "\x1f"


def share_of(request: DispatchRequested) -> str:
    """The share a waiting request is queued and served under: its scanner's pool and its
    organization, so a full pool or an organization at its cap is passed over whole."""
    return f"{request.scanner}{SHARE_SEPARATOR}{organization_of(request)}"


def organization_of(request: DispatchRequested) -> str:
    """The organization a request is shared under; NO_ORGANIZATION when it has none."""
    return request.organization or NO_ORGANIZATION


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
