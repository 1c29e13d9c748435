"""5. Projection: host-state changes written to PostgreSQL per second, and the lag at 5,000/s.

Only the projector runs (`streams.projection.runner.Projector`, in its own process, started
as `python -m bench.scenarios.projection projector` with the worker's environment), against
the Kairos topics (`streams.admin.ensure_topics`) and a migrated database
(`kairos.floor.db.migrate`).
The bench writes the records of the worker's hosts changelog itself (what the projector reads:
key the host id as JSON, value the host's `HostSchedule`) — full payloads with attributes,
labels, mixed states and in-flight commands, N distinct hosts, versions 1, 2, 3 … per host,
published in rounds (every host once per round) with a batched aiokafka producer.

(a) **Drain rate.** The backlog (N hosts × R rounds) is published *before* the projector
    starts, so the figure is the projector's, not the producer's. Every 0.25 s the bench reads
    `sum(version)` of host_schedule: the number of host versions visible in PostgreSQL (a host
    at version v has absorbed v changes). Rate between 10 % and 90 % of all versions.
(b) **Lag at a steady 5,000 changes/s.** With the projector caught up, records are published
    paced at 5,000/s (20 ms ticks). Every 25th record is a probe: (host, version, wall time of
    `producer.send`). Every 50 ms the bench reads the versions of the pending probe hosts; a
    probe's lag is the poll instant its version (or a newer one) was first visible minus its
    send time — producer linger, broker, projector batch, PostgreSQL commit, and up to one
    poll interval (≤ 50 ms) of resolution. A probe never seen by the end counts with
    `end − sent` as a lower bound. `projection_progress.lag_seconds` (what the projector
    reports about itself, its worst partition's) is sampled at every poll as a secondary figure.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from pydantic import BaseModel

from bench.kafka_io import Offsets, send_all, start_producer
from bench.metrics import ProcessSampler, distribution
from bench.report import Figure, plot_latency, plot_series
from bench.scenarios.common import Context, new_result
from bench.scenarios.throughput import crossing
from bench.stack import BenchStack, ChildProcess, wait_ready, worker_env
from kairos.floor.settings import Settings
from schemas.state import STATE_FORMAT, HostSchedule, InFlightCommand
from streams import codec
from streams.topology import HOSTS

KEY, NUMBER, TITLE = "projection", 5, "Projection"
RATE_TARGET = 20_000.0
LAG_TARGET = 1.0
STEADY_RATE = 5_000
TICK = 0.02
PROBE_EVERY = 25
POLL = 0.05
READY_LINE = "projector ready"
STATES = ("compliant", "compliant", "compliant", "mostly_compliant", "partial", "low",
          "critical", "unknown")  # fmt: skip


# --- payloads ------------------------------------------------------------------------


def _templates(now: datetime) -> list[dict[str, Any]]:
    """A few realistic HostSchedule shapes, as the worker stores them (JSON under the short
    keys); each record varies one of them."""
    out = []
    for index, state in enumerate(STATES):
        in_flight = None
        if index % 3 == 0:
            in_flight = {"command_id": "cmd-template", "reason": "scheduled", "priority": 10,
                         "due_at": now, "attempt": 1, "claimed_at": now, "issued_at": now,
                         "deadline": now + timedelta(hours=2)}  # fmt: skip
        schedule = HostSchedule(
            host_id="template", version=1, state=state, compliance_state=state,
            score=None if state == "unknown" else 40.0 + 7 * index,
            current_interval_minutes=1440 if state == "compliant" else 360,
            next_scheduled_scan=now + timedelta(hours=index + 1),
            last_scan_completed=now - timedelta(hours=23), last_scan_id=f"scan-{index}",
            scan_priority=10 + index, incarnation="00000000-0000-0000-0000-000000000000",
            due_instance=12, in_flight=in_flight,
            attributes={"hostname": "template", "ip": "10.0.0.1", "os": "rhel-9",
                        "organization": f"org-{index % 4}",
                        "labels": {"env": "prod" if index % 2 else "staging",
                                   "team": f"team-{index}", "region": "eu-west-1"}},
            recent_event_ids=tuple(f"{index:02d}{n:030d}" for n in range(4)),
            created_at=now - timedelta(days=30), updated_at=now,
        )  # fmt: skip
        stored = schedule.model_dump(
            mode="json", by_alias=True, exclude_none=True, exclude_defaults=True
        )
        out.append({_key("format"): STATE_FORMAT, **stored})
    return out


def _key(name: str, model: type[BaseModel] = HostSchedule) -> str:
    """The short key the worker stores a field under (`schemas.state`)."""
    alias = model.model_fields[name].alias
    assert alias is not None
    return alias


HOST_ID, VERSION, ATTRIBUTES = _key("host_id"), _key("version"), _key("attributes")
UPDATED_AT, IN_FLIGHT = _key("updated_at"), _key("in_flight")
COMMAND_ID = _key("command_id", InFlightCommand)


class Payloads:
    """A hosts changelog record for (host index, version): the host's schedule as JSON,
    `updated_at` the wall time of encoding (the projector's change time)."""

    def __init__(self, hosts: list[str]) -> None:
        self.hosts = hosts
        self.templates = _templates(datetime.now(UTC))

    def record(self, index: int, version: int) -> tuple[bytes, bytes]:
        host = self.hosts[index]
        schedule = copy.copy(self.templates[(index + version) % len(self.templates)])
        now = datetime.now(UTC).isoformat()
        attributes = dict(
            schedule[ATTRIBUTES],
            hostname=f"{host}.bench.test",
            ip=f"10.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}",
        )
        schedule.update({HOST_ID: host, VERSION: version, ATTRIBUTES: attributes, UPDATED_AT: now})
        if IN_FLIGHT in schedule:
            schedule[IN_FLIGHT] = dict(schedule[IN_FLIGHT], **{COMMAND_ID: f"{host}:{version}"})
        return json.dumps(host).encode(), json.dumps(schedule, separators=(",", ":")).encode()

    def check(self) -> None:
        key, value = self.record(0, 1)
        codec.host_changelog_change(key, value, (), 0)

    def rounds(self, first: int, last: int) -> Iterator[tuple[bytes, bytes]]:
        for version in range(first, last + 1):
            for index in range(len(self.hosts)):
                yield self.record(index, version)


# --- the projector, alone, in its own process ---------------------------------------------


def _child_main() -> None:
    """`python -m bench.scenarios.projection projector`: run one Projector until killed."""
    from kairos.floor.clock import clock_for_speed
    from kairos.floor.collection import pace_for_streaming
    from streams.projection.runner import Projector

    settings = Settings()
    projector = Projector(settings, clock_for_speed(settings.clock_speed, settings.clock_origin))
    pace_for_streaming()  # As `kairos projector` does.
    print(READY_LINE, flush=True)
    asyncio.run(projector.run())


def start_projector(stack: BenchStack, settings: Settings) -> ChildProcess:
    argv = [sys.executable, "-m", "bench.scenarios.projection", "projector"]
    return stack.spawn("projector", argv, worker_env(settings))


# --- measurement --------------------------------------------------------------------------


async def _versions(conn: psycopg.AsyncConnection) -> tuple[int, int]:
    cursor = await conn.execute("SELECT coalesce(sum(version), 0), count(*) FROM host_schedule")
    row = await cursor.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def _backends(conn: psycopg.AsyncConnection) -> dict[str, int]:
    """The server process serving the projector: the other client on this database."""
    cursor = await conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY pid"
    )
    pids = [row[0] for row in await cursor.fetchall()]
    return {"pg_backend": pids[0]} if len(pids) == 1 else {}


async def drain(ctx: Context, settings: Settings, payloads: Payloads, rounds: int,
                timeout: float) -> tuple[dict[str, Any], ChildProcess, ProcessSampler]:  # fmt: skip
    n = len(payloads.hosts)
    total = n * rounds
    producer = await start_producer(settings)
    published_at = time.time()
    try:
        with ctx.ui.phase(f"publishing {total:,} hosts changelog records ({n:,} hosts × {rounds})",
                          total=total) as phase:  # fmt: skip
            await send_all(producer, HOSTS.changelog(settings), payloads.rounds(1, rounds),
                           on_sent=lambda k: phase.update(k))  # fmt: skip
    finally:
        await producer.stop()
    publish_seconds = time.time() - published_at
    child = start_projector(ctx.stack, settings)
    await asyncio.to_thread(wait_ready, child, 60.0, READY_LINE)
    watched: dict[str, int] = {}  # + the projector's PostgreSQL backend once it has connected
    sampler = ProcessSampler(lambda: {"projector": child.pid, **watched} if child.alive() else {},
                             0.5)  # fmt: skip
    await sampler.__aenter__()
    started = time.time()
    points: list[tuple[float, int]] = [(0.0, 0)]
    rows = 0
    async with await psycopg.AsyncConnection.connect(settings.database_url,
                                                     autocommit=True) as conn:  # fmt: skip
        with ctx.ui.phase(f"projector draining {total:,} changes", total=total) as phase:
            while time.time() - started < timeout:
                if not child.alive():
                    raise RuntimeError(f"projector exited:\n{child.log_tail()}")
                versions, rows = await _versions(conn)
                if versions and not watched:
                    watched.update(await _backends(conn))
                points.append((time.time() - started, versions))
                phase.update(versions)
                if versions >= total:
                    break
                await asyncio.sleep(0.25)
    end = time.time()
    low, high = crossing(points, 0.1 * total), crossing(points, 0.9 * total)
    sustained = 0.8 * total / (high - low) if low is not None and high is not None else None
    first_seen = next((at for at, count in points if count > 0), None)
    finished = points[-1][1] >= total
    return (
        {
            "hosts": n,
            "rounds": rounds,
            "records": total,
            "publish_seconds": publish_seconds,
            "versions_visible": points[-1][1],
            "rows": rows,
            "finished": finished,
            "seconds_from_start_to_first_row": first_seen,
            "seconds_from_start_to_all": points[-1][0] if finished else None,
            "sustained_rate_10_90": sustained,
            "projector_cpu_cores": sampler.cpu_share("projector", started, end),
            "postgres_backend_cpu_cores": sampler.cpu_share("pg_backend", started, end),
            "projector_cpu_us_per_change": _per_change(
                sampler.cpu_share("projector", started, end), end - started, points[-1][1]
            ),
            "postgres_backend_cpu_us_per_change": _per_change(
                sampler.cpu_share("pg_backend", started, end), end - started, points[-1][1]
            ),
            "points": points,
        },
        child,
        sampler,
    )


def _per_change(cores: float | None, seconds: float, changes: int) -> float | None:
    """µs of CPU per change: steadier than the rate, which moves with the machine's speed."""
    if cores is None or not changes:
        return None
    return cores * seconds / changes * 1e6


async def steady(ctx: Context, settings: Settings, payloads: Payloads, first_version: int,
                 seconds: float) -> dict[str, Any]:  # fmt: skip
    n = len(payloads.hosts)
    pending: dict[str, list[tuple[int, float]]] = {}  # host -> [(version, sent at)]
    lags: list[float] = []
    self_reported: list[float] = []
    sent = 0
    done = asyncio.Event()
    producer = await start_producer(settings, linger_ms=5)

    async def publish() -> None:
        nonlocal sent
        futures: list[asyncio.Future[Any]] = []
        begin = time.time()
        topic = HOSTS.changelog(settings)
        try:
            while (elapsed := time.time() - begin) < seconds:
                target = int(elapsed * STEADY_RATE)
                while sent < target:
                    index = sent % n
                    version = first_version + sent // n
                    key, value = payloads.record(index, version)
                    futures.append(await producer.send(topic, value, key=key))
                    if sent % PROBE_EVERY == 0:
                        pending.setdefault(payloads.hosts[index], []).append((version, time.time()))
                    sent += 1
                if len(futures) > 5000:
                    await asyncio.gather(*futures)
                    futures.clear()
                await asyncio.sleep(TICK)
            await producer.flush()
            await asyncio.gather(*futures)
        finally:
            done.set()

    async def poll(conn: psycopg.AsyncConnection) -> None:
        while True:
            hosts = list(pending)
            if hosts:
                cursor = await conn.execute(
                    "SELECT host_id, version FROM host_schedule WHERE host_id = ANY(%s)", (hosts,)
                )
                seen = time.time()
                for host, version in await cursor.fetchall():
                    probes = pending.get(host, [])
                    lags.extend(seen - at for wanted, at in probes if wanted <= version)
                    left = [probe for probe in probes if probe[0] > version]
                    if left:
                        pending[host] = left
                    else:
                        pending.pop(host, None)
            # The worst partition's, as /status reports it (one row per partition read).
            cursor = await conn.execute("SELECT max(lag_seconds) FROM projection_progress")
            row = await cursor.fetchone()
            if row is not None and row[0] is not None:
                self_reported.append(float(row[0]))
            if done.is_set() and not pending:
                return
            await asyncio.sleep(POLL)

    started = time.time()
    async with await psycopg.AsyncConnection.connect(settings.database_url,
                                                     autocommit=True) as conn:  # fmt: skip
        with ctx.ui.phase(f"steady {STEADY_RATE:,} changes/s for {seconds:.0f} s") as phase:
            publisher = asyncio.create_task(publish())
            poller = asyncio.create_task(poll(conn))
            try:
                while not publisher.done():
                    phase.update(note=f"sent {sent:,}, probes seen {len(lags):,}")
                    await asyncio.sleep(0.5)
                await publisher
                try:
                    await asyncio.wait_for(poller, timeout=30.0)
                except TimeoutError:
                    pass
            finally:
                for task in (publisher, poller):
                    task.cancel()
                await producer.stop()
    end = time.time()
    unseen = [end - at for probes in pending.values() for _, at in probes]
    publish_seconds = end - started
    return {
        "rate_planned": STEADY_RATE,
        "seconds": seconds,
        "records_sent": sent,
        "rate_achieved": sent / seconds,
        "probes": len(lags) + len(unseen),
        "probes_unseen_by_end": len(unseen),
        "lag_s": distribution(lags),
        "lag_with_unseen_as_lower_bound_s": distribution(lags + unseen) if unseen else None,
        "projection_progress_lag_seconds": distribution(self_reported),
        "wall_seconds": publish_seconds,
        "_lags": lags,
    }


async def run(ctx: Context, systems: set[str] | None = None) -> Any:
    from kairos.floor.db import migrate
    from streams.admin import ensure_topics

    n = ctx.size(quick=30_000, full=200_000)
    rounds = 3 if ctx.quick else 5
    seconds = 12.0 if ctx.quick else 60.0
    timeout = 180.0 if ctx.quick else 900.0
    result = new_result(ctx, KEY, NUMBER, TITLE, hosts=n, rounds=rounds,
                        steady_rate=STEADY_RATE, steady_seconds=seconds,
                        probe_every=PROBE_EVERY, poll_seconds=POLL)  # fmt: skip
    settings = ctx.stack.settings("proj")
    with ctx.ui.phase("topics and migrations"):
        await ensure_topics(settings)
        await migrate(settings.database_url)
    payloads = Payloads([f"proj-{number:07d}" for number in range(n)])
    payloads.check()
    child: ChildProcess | None = None
    sampler: ProcessSampler | None = None
    try:
        drained, child, sampler = await drain(ctx, settings, payloads, rounds, timeout)
        async with Offsets(settings) as offsets:
            group = f"{settings.topic_prefix}{settings.app_id}-projector"
            await offsets.wait_caught_up(group, [HOSTS.changelog(settings)], timeout=60,
                                         stable_for=1.0)  # fmt: skip
        steady_started = time.time()
        held = await steady(ctx, settings, payloads, rounds + 1, seconds)
        held["projector_cpu_cores"] = sampler.cpu_share("projector", steady_started, time.time())
        held["postgres_backend_cpu_cores"] = sampler.cpu_share(
            "pg_backend", steady_started, time.time()
        )
    finally:
        if sampler is not None:
            await sampler.__aexit__(None, None, None)
        if child is not None:
            child.stop(grace=5.0)
            if child in ctx.stack.children:
                ctx.stack.children.remove(child)
    result.details["drain"] = {k: v for k, v in drained.items() if k != "points"}
    result.details["steady"] = {k: v for k, v in held.items() if not k.startswith("_")}
    scale = f"at {n:,} hosts × {rounds} rounds" + (" (quick)" if ctx.quick else "")
    rate = drained["sustained_rate_10_90"]
    result.figures.append(Figure(
        label=f"host-state changes written/s, backlog drain ({n * rounds:,} records)",
        unit="/s", kairos=rate if rate is not None else math.nan, better="higher",
        target=RATE_TARGET, target_text="≥ 20,000/s", scale_note=scale,
        lower_bound=not drained["finished"]))  # fmt: skip
    result.figures.append(Figure(
        label="projector CPU per change, backlog drain",
        unit="µs", kairos=drained["projector_cpu_us_per_change"]))  # fmt: skip
    lag_key = "lag_with_unseen_as_lower_bound_s" if held["probes_unseen_by_end"] else "lag_s"
    for key in ("p50", "p99", "max"):
        result.figures.append(Figure(
            label=f"{key} lag at {STEADY_RATE:,} changes/s (send → version visible)", unit="s",
            kairos=held[lag_key].get(key, math.nan),
            target=LAG_TARGET if key == "p99" else None,
            target_text="p99 ≤ 1 s" if key == "p99" else "",
            scale_note=f"{seconds:.0f} s at {n:,} hosts" if key == "p99" else "",
            lower_bound=bool(held["probes_unseen_by_end"])))  # fmt: skip
    reported = held["projection_progress_lag_seconds"]
    result.figures.append(Figure(
        label="p99 of projection_progress.lag_seconds (projector's own figure, polled)",
        unit="s", kairos=reported.get("p99", math.nan)))  # fmt: skip
    result.notes += [
        f"{'Quick' if ctx.quick else 'Full'} mode: {n:,} hosts, {rounds} rounds of versions "
        f"({n * rounds:,} records) for the drain, then {seconds:.0f} s at {STEADY_RATE:,}/s "
        f"({held['records_sent']:,} records, achieved {held['rate_achieved']:,.0f}/s).",
        "Drain: the backlog is published before the projector starts; the rate counts host "
        "versions visible in PostgreSQL (sum(version)); versions of one host inside one "
        "5,000-record batch are collapsed by the projector and count as written.",
        "Lag probes: every 25th record; resolution one poll (50 ms) plus the query; the "
        "steady producer lingers 5 ms. The projector, broker, PostgreSQL and the bench's "
        f"producer share 2 cores; projector CPU: drain {drained['projector_cpu_cores'] or 0:.2f}"
        f", steady {held['projector_cpu_cores'] or 0:.2f} cores; its PostgreSQL backend: drain "
        f"{drained['postgres_backend_cpu_cores'] or 0:.2f}, steady "
        f"{held['postgres_backend_cpu_cores'] or 0:.2f} cores.",
        "CPU per change in the drain, from the projector's start to the last version visible:"
        f" projector {drained['projector_cpu_us_per_change'] or 0:,.0f} µs, its PostgreSQL "
        f"backend {drained['postgres_backend_cpu_us_per_change'] or 0:,.0f} µs.",
    ]
    png = ctx.plot_path(KEY, "drain")
    points = drained["points"]
    if plot_series(png, {"host versions visible": ([p[0] for p in points],
                                                  [float(p[1]) for p in points])},
                   "Projector draining a host-state backlog", "versions in host_schedule",
                   xlabel="seconds since the projector started"):  # fmt: skip
        result.plots.append(png.name)
    png = ctx.plot_path(KEY, "lag")
    if plot_latency(
        png,
        {"projector": held["_lags"]},
        f"Projection lag at {STEADY_RATE:,} changes/s",
        "send → visible",
    ):
        result.plots.append(png.name)
    return result


if __name__ == "__main__" and sys.argv[1:] == ["projector"]:
    _child_main()
