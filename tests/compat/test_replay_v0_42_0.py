"""Today's worker and projector recover the state the v0.42.0 release left in Kafka.

`v0.42.0/` holds every topic's records as that release wrote them on the scenario of
`record.py` (README.md here says how it was recorded), and the rows its projector wrote. The
records go back into a fresh Apache Kafka with their own topics, partitions, keys and
timestamps, the worker group's committed offsets with them; today's worker and projector
start on them with the scheduler clock resuming where the recording stopped, and a fresh
read model. Today's code must rebuild the same hosts and schedules, keep every due instant,
dead-letter nothing new, and send the commands left in flight again under their own ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from kairos.floor.settings import Settings
from schemas.schedules import ScheduleStateChanged
from schemas.state import HostSchedule
from tests.compat.history import READ_MODEL, decode_bytes, load_records, load_topics, restore
from tests.support.kafka import Collector, wait_until
from tests.support.stack import ProjectorProcess, WorkerProcess

pytestmark = pytest.mark.integration

HISTORY = Path(__file__).parent / "v0.42.0"
LAYOUT = load_topics(HISTORY)
META = LAYOUT["meta"]
PROJECTOR_GROUP = f"{META['topic_prefix']}{META['app_id']}-projector"


@pytest.fixture(scope="module")
def fresh_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An Apache Kafka of its own: the history's topic names are fixed."""
    from kairos.localstack.apache import ApacheKafkaCluster, java_and_maven_available

    if not java_and_maven_available():
        pytest.skip("the recorded history is restored into Apache Kafka: Java and Maven needed")
    cluster = ApacheKafkaCluster(tmp_path_factory.mktemp("compat-kafka"), nodes=1)
    cluster.start()
    try:
        yield cluster.bootstrap_servers
    finally:
        cluster.stop()


def _plain(value: Any) -> Any:
    """A value as the recording's JSON holds it."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    return value


def read_model(database_url: str) -> dict[str, dict[str, dict[str, Any]]]:
    """host_schedule and schedules rows by id, dead_letters by event id, values as the
    recording wrote them (times in ISO 8601)."""
    keys = {"host_schedule": "host_id", "schedules": "schedule_id", "dead_letters": "event_id"}
    model: dict[str, dict[str, dict[str, Any]]] = {}
    with psycopg.connect(database_url) as conn:
        for table, key in keys.items():
            cursor = conn.execute(f"SELECT * FROM {table}")
            columns = [column.name for column in cursor.description or ()]
            rows = [{c: _plain(v) for c, v in zip(columns, row, strict=True)} for row in cursor]
            model[table] = {str(row[key]): row for row in rows}
    return model


def recorded_model() -> dict[str, dict[str, dict[str, Any]]]:
    stored = json.loads((HISTORY / READ_MODEL).read_text())
    keys = {"host_schedule": "host_id", "schedules": "schedule_id", "dead_letters": "event_id"}
    return {table: {str(row[key]): row for row in stored[table]} for table, key in keys.items()}


def _values(topic: str) -> list[tuple[bytes | None, bytes | None]]:
    return [
        (decode_bytes(r["key"]), decode_bytes(r["value"]))
        for r in RECORDS
        if r["topic"] == f"{META['topic_prefix']}{topic}"
    ]


RECORDS = load_records(HISTORY)


def recorded_hosts() -> dict[str, HostSchedule]:
    """The last state of each host on the recorded hosts changelog, read by today's model."""
    hosts: dict[str, HostSchedule] = {}
    for _key, value in _values(f"{META['app_id']}-hosts-changelog"):
        if value is not None:
            schedule = HostSchedule.model_validate_json(value)
            hosts[schedule.host_id] = schedule
    return hosts


def recorded_schedules() -> dict[str, ScheduleStateChanged]:
    found: dict[str, ScheduleStateChanged] = {}
    for _key, value in _values("kairos-schedules"):
        if value is not None:
            change = ScheduleStateChanged.model_validate_json(value)
            found[change.schedule_id] = change
    return found


def in_flight_at_the_end() -> set[str]:
    """Commands sent on scan-commands that no result on scan-completed answered."""
    sent = {json.loads(value or b"{}")["command_id"] for _key, value in _values("scan-commands")}
    answered = {
        json.loads(value or b"{}")["command_id"] for _key, value in _values("scan-completed")
    }
    return sent - answered


def recorded_end_offsets(topic: str) -> dict[int, int]:
    ends: dict[int, int] = {}
    for record in RECORDS:
        if record["topic"] == topic:
            ends[record["partition"]] = max(ends.get(record["partition"], 0), record["offset"] + 1)
    return ends


async def end_offsets(settings: Settings, topic: str, partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(**settings.kafka_client_options(), group_id=None)
    await consumer.start()
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        return {
            tp.partition: offset for tp, offset in (await consumer.end_offsets(assigned)).items()
        }
    finally:
        await consumer.stop()


def test_the_history_holds_the_scenario() -> None:
    """The recording is what the assertions below rely on: every state, work in flight."""
    hosts = recorded_hosts()
    states = {schedule.state.value for schedule in hosts.values()}
    assert states >= {
        "unknown",
        "critical",
        "low",
        "partial",
        "mostly_compliant",
        "compliant",
        "maintenance",
    }, states
    assert any(not schedule.is_active for schedule in hosts.values())
    assert any(schedule.status.value == "down" for schedule in hosts.values())
    assert {h for h, s in hosts.items() if s.in_flight is not None} >= set(META["in_flight_hosts"])
    assert len(in_flight_at_the_end()) > len(META["in_flight_hosts"])  # a schedule's run too
    assert {change.state.schedule.recurrence.kind for change in recorded_schedules().values()} >= {
        "cron",
        "interval",
    }
    assert any(change.state.in_flight for change in recorded_schedules().values())
    assert len(_values("dead-letters")) == 1


async def test_todays_worker_and_projector_recover_the_v0_42_0_history(
    fresh_kafka: str,
    postgres_server: Callable[[str], str],
    workers: Callable[[Settings], WorkerProcess],
    projectors: Callable[[Settings], ProjectorProcess],
) -> None:
    recorded_until = datetime.fromisoformat(META["recorded_until"])
    settings = Settings.model_validate(
        {
            "kafka_bootstrap_servers": fresh_kafka,
            "database_url": postgres_server("kairos_compat_replay"),
            "topic_prefix": META["topic_prefix"],
            "app_id": META["app_id"],
            "partitions": META["partitions"],
            "kafka_idempotence": True,
            "tick_seconds": 0.05,
            "projector_enabled": False,
            # Scheduler time resumes where the recording stopped, at the speed it ran.
            "clock_speed": 1.0,
            "clock_origin": datetime.now(UTC),
            "clock_start": recorded_until,
        }
    )
    names = settings.topics
    # The read model is new, so the projector reads from the start: its offsets stay behind.
    await restore(fresh_kafka, HISTORY, groups=set(LAYOUT["groups"]) - {PROJECTOR_GROUP})
    sent_before = recorded_end_offsets(names.scan_commands)
    expected_hosts = recorded_hosts()
    expected_schedules = recorded_schedules()
    in_flight = in_flight_at_the_end()

    async with Collector(settings, names.scan_commands) as collector:
        projectors(settings)
        workers(settings)

        def sent_again() -> list[dict[str, Any]]:
            return [
                json.loads(record.value)
                for record in list(collector.records)
                if record.offset >= sent_before.get(record.partition, 0)
            ]

        def projected() -> bool:
            model = read_model(settings.database_url)
            hosts, schedules = model["host_schedule"], model["schedules"]
            return all(
                host_id in hosts and hosts[host_id]["version"] >= schedule.version
                for host_id, schedule in expected_hosts.items()
            ) and all(
                schedule_id in schedules and schedules[schedule_id]["version"] >= change.version
                for schedule_id, change in expected_schedules.items()
            )

        await wait_until(projected, timeout=90, what="the recorded hosts and schedules projected")
        await wait_until(
            lambda: {c["command_id"] for c in sent_again()} >= in_flight,
            timeout=90,
            what=f"the {len(in_flight)} commands in flight sent again",
        )

    # Commands in flight go out again under their own ids, and nothing else goes out.
    again = sent_again()
    assert {c["command_id"] for c in again} == in_flight, again

    model = read_model(settings.database_url)
    hosts = model["host_schedule"]
    assert set(hosts) == set(expected_hosts)
    for host_id, expected in expected_hosts.items():
        row = hosts[host_id]
        seen = {
            "version": row["version"],
            "state": row["state"],
            "compliance_state": row["compliance_state"],
            "next_scheduled_scan": row["next_scheduled_scan"],
            "in_flight_command_id": row["in_flight_command_id"],
            "maintenance_mode": row["maintenance_mode"],
            "is_active": row["is_active"],
            "status": row["status"],
            "consecutive_scan_failures": row["consecutive_scan_failures"],
        }
        wanted = {
            "version": expected.version,
            "state": expected.state.value,
            "compliance_state": expected.compliance_state.value,
            "next_scheduled_scan": expected.next_scheduled_scan.isoformat(),
            "in_flight_command_id": expected.in_flight_command_id,
            "maintenance_mode": expected.maintenance_mode,
            "is_active": expected.is_active,
            "status": expected.status.value,
            "consecutive_scan_failures": expected.consecutive_scan_failures,
        }
        assert seen == wanted, host_id

    schedules = model["schedules"]
    assert set(schedules) == set(expected_schedules)
    for schedule_id, change in expected_schedules.items():
        row = schedules[schedule_id]
        state = change.state
        assert (row["version"], row["enabled"], row["paused"]) == (
            change.version,
            state.enabled,
            state.paused,
        ), schedule_id
        next_fire = state.next_fire_at.isoformat() if state.next_fire_at else None
        assert row["next_fire_at"] == next_fire, schedule_id

    # The read model matches the old projector's, field by field, where both have the field.
    old = recorded_model()
    for table in ("host_schedule", "schedules", "dead_letters"):
        assert set(model[table]) == set(old[table]), table
        for key, old_row in old[table].items():
            new_row = model[table][key]
            shared = sorted(set(old_row) & set(new_row))
            differing = {
                column: (old_row[column], new_row[column])
                for column in shared
                if old_row[column] != new_row[column]
            }
            assert not differing, (table, key, differing)

    # No dead letter beyond the recorded one.
    dead = await end_offsets(settings, names.dead_letters, settings.partitions)
    assert sum(dead.values()) == sum(recorded_end_offsets(names.dead_letters).values()) == 1
