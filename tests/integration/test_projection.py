"""The read model follows the worker exactly, and survives PostgreSQL going away."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, datetime

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from kairos.floor.settings import Settings
from schemas.state import HostStateChanged
from streams import codec
from tests.support.agents import ScannerFleet
from tests.support.factories import (
    host_created,
    host_deleted,
    host_updated,
    maintenance_set,
    scan_requested,
    scheduler_toggled,
)
from tests.support.kafka import hosts_changelog, publish, start_producer, wait_until

pytestmark = pytest.mark.integration

COMPARED = (
    "state", "compliance_state", "score", "current_interval_minutes", "next_scheduled_scan",
    "last_scan_completed", "last_scan_id", "last_error", "maintenance_mode", "maintenance_until",
    "scan_priority", "consecutive_scan_failures", "in_flight_command_id", "is_active", "status",
    "version", "created_at", "updated_at",
)  # fmt: skip


async def worker_table_state(settings: Settings) -> dict[str, HostStateChanged]:
    """The newest state of every host not deleted, read from the worker's hosts changelog."""
    latest: dict[str, HostStateChanged] = {}
    for change in await changelog_changes(settings):
        if change.schedule is None:  # Deleted (a tombstone).
            latest.pop(change.host_id, None)
            continue
        current = latest.get(change.host_id)
        if current is None or change.version > current.version:
            latest[change.host_id] = change
    return latest


async def changelog_changes(settings: Settings) -> list[HostStateChanged]:
    """Every record of the worker's hosts changelog as the projector reads it, each
    partition's in order."""
    consumer = AIOKafkaConsumer(
        **settings.kafka_client_options(), group_id=None, enable_auto_commit=False
    )
    await consumer.start()
    changes: list[HostStateChanged] = []
    try:
        topic = hosts_changelog(settings)
        partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        end = await consumer.end_offsets(partitions)
        remaining = {tp for tp, offset in end.items() if offset > 0}
        while remaining:
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                changes.extend(
                    codec.host_changelog_change(
                        record.key, record.value, record.headers, record.timestamp
                    )
                    for record in records
                )
            for tp in list(remaining):
                if await consumer.position(tp) >= end[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    return changes


def projected_rows(dsn: str) -> dict[str, dict]:
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        cursor.execute("SELECT * FROM host_schedule WHERE NOT deleted")
        return {row["host_id"]: row for row in cursor.fetchall()}


def counters(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT state, hosts FROM host_state_counts WHERE hosts <> 0"
        ).fetchall()
    return dict(rows)


async def test_every_projected_row_matches_the_worker_state_field_by_field(
    make_settings, workers
) -> None:
    settings = make_settings(clock_speed=3600.0, clock_origin=datetime.now(UTC))
    workers(settings)
    names = settings.topics
    rng = random.Random(7)
    hosts = [f"proj-{number:03d}" for number in range(60)]
    producer = await start_producer(settings)

    def score(command: dict) -> float | None:
        return None if rng.random() < 0.2 else rng.choice([100, 90, 60, 30, 5])

    async with ScannerFleet(settings, score_for=score) as fleet:
        for host in hosts:
            await producer.send(
                names.object_created,
                host_created(host).model_dump_json().encode(),
                key=host.encode(),
            )
        await producer.flush()
        await wait_until(lambda: len(fleet.commands) >= 120, timeout=60, what="two rounds")
        for host in hosts[:10]:
            change = maintenance_set(host, enabled=True, hours=rng.choice([None, 2]))
            await producer.send(
                names.schedule_changes, change.model_dump_json().encode(), key=host.encode()
            )
        for host in hosts[10:20]:
            await producer.send(
                names.schedule_changes,
                scan_requested(host).model_dump_json().encode(),
                key=host.encode(),
            )
        await producer.flush()
        await wait_until(lambda: len(fleet.commands) >= 250, timeout=60, what="more rounds")
        # Quiesce: with the scheduler off, unanswered commands time out and nothing new starts.
        off = scheduler_toggled(False)
        await producer.send_and_wait(
            names.schedule_changes, off.model_dump_json().encode(), key=b"config"
        )
        await asyncio.sleep(1.0)
    await producer.stop()
    await asyncio.sleep(3.0)

    expected = await worker_table_state(settings)
    assert set(expected) == set(hosts)

    def caught_up() -> bool:
        rows = projected_rows(settings.database_url)
        return set(rows) == set(hosts) and all(
            rows[h]["version"] == expected[h].version for h in hosts
        )

    try:
        await wait_until(
            caught_up, timeout=30, what="the projection to reach the worker's versions"
        )
    except AssertionError:
        rows = projected_rows(settings.database_url)
        behind = [(h, rows.get(h, {}).get("version"), expected[h].version) for h in hosts]
        lagging = [entry for entry in behind if entry[1] != entry[2]][:10]
        raise AssertionError(f"projection behind: {lagging}") from None
    rows = projected_rows(settings.database_url)
    mismatches = []
    for host, change in expected.items():
        schedule = change.schedule
        assert schedule is not None
        want = json.loads(schedule.model_dump_json())
        want["in_flight_command_id"] = schedule.in_flight_command_id
        for column in COMPARED:
            got = rows[host][column]
            if isinstance(got, datetime):
                got = got.astimezone(UTC)
                wanted = datetime.fromisoformat(want[column]) if want[column] else None
            else:
                wanted = want[column]
            if got != wanted:
                mismatches.append((host, column, got, wanted))
    assert not mismatches, mismatches[:10]
    by_state: dict[str, int] = {}
    for change in expected.values():
        assert change.schedule is not None
        by_state[change.schedule.state.value] = by_state.get(change.schedule.state.value, 0) + 1
    assert counters(settings.database_url) == by_state


async def test_projection_pauses_while_postgres_is_down_and_catches_up_losing_nothing(
    make_settings, workers, tmp_path
) -> None:
    from kairos.localstack.ports import free_port
    from kairos.localstack.postgres import LocalPostgres

    # A fixed port, so the restarted server is where the worker's DSN points.
    server = LocalPostgres(tmp_path / "pg", port=free_port(), fast=True)
    server.start()
    try:
        dsn = server.create_database("kairos")
        settings = make_settings(database_url=dsn)
        worker = workers(settings)
        names = settings.topics
        producer = await start_producer(settings)
        async with ScannerFleet(settings) as fleet:
            first = [f"before-{n}" for n in range(20)]
            for host in first:
                await producer.send(
                    names.object_created,
                    host_created(host).model_dump_json().encode(),
                    key=host.encode(),
                )
            await producer.flush()
            await wait_until(lambda: len(projected_rows(dsn)) == 20, timeout=30, what="first rows")
            server.stop()
            second = [f"during-{n}" for n in range(30)]
            for host in second:
                await producer.send(
                    names.object_created,
                    host_created(host).model_dump_json().encode(),
                    key=host.encode(),
                )
            await producer.flush()
            # Scheduling does not wait on PostgreSQL: commands keep flowing.
            await wait_until(
                lambda: {c["host_id"] for c in fleet.commands} >= set(second),
                timeout=30,
                what="commands for hosts created while PostgreSQL was down",
            )
            await asyncio.sleep(2.0)
            server.start()
            await wait_until(lambda: len(projected_rows(dsn)) == 50, timeout=60, what="catch-up")
        await producer.stop()
        assert worker.process.poll() is None
        assert "projection paused" in worker.log()
        assert worker.log().count("Traceback") == 0
    finally:
        server.stop()


async def test_a_host_deleted_and_created_again_is_projected_as_new(
    settings: Settings, workers
) -> None:
    # The host created again starts over at version 1, far below the deleted row's version.
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)

    def row() -> tuple | None:
        with psycopg.connect(settings.database_url) as conn:
            return conn.execute(
                "SELECT deleted, organization, version FROM host_schedule WHERE host_id = 'again-1'"
            ).fetchone()

    try:
        await publish(producer, names.object_created, "again-1", host_created("again-1"))
        for number in range(6):  # Versions for the first incarnation: each update is one.
            update = host_updated("again-1", organization=f"first-{number}")
            await publish(producer, names.object_created, "again-1", update)
        await wait_until(
            lambda: row() is not None and row()[1] == "first-5",  # type: ignore[index]
            timeout=30,
            what="the first incarnation's last update",
        )
        await publish(producer, names.object_created, "again-1", host_deleted("again-1"))
        await wait_until(lambda: (row() or (False,))[0], timeout=30, what="the deletion projected")
        deleted_version = row()[2]  # type: ignore[index]
        again = host_created("again-1", organization="second")
        await publish(producer, names.object_created, "again-1", again)
        await wait_until(
            lambda: (row() or ())[:2] == (False, "second"),
            timeout=30,
            what="the host created again",
        )
        # Its claim, when it comes due, may add a version; nothing else changes the host.
        projected = row()
    finally:
        await producer.stop()
    assert deleted_version >= 8
    assert projected is not None and projected[2] < deleted_version
    assert counters(settings.database_url) == {"unknown": 1}
    # The tombstone says which incarnation it ended: read again after the host was created
    # again, it leaves the new one alone (test_projection_host_rows).
    changes = [c for c in await changelog_changes(settings) if c.host_id == "again-1"]
    ended = next(i for i, change in enumerate(changes) if change.schedule is None)
    first, second = changes[ended - 1].schedule, changes[ended + 1].schedule
    assert first is not None and second is not None
    assert changes[ended].deleted_created_at == first.created_at != second.created_at
