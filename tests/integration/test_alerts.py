"""Alerts end to end: raised once on the `alerts` topic and in `GET …/alerts`, then resolved.

A real worker (with its projector) on a real broker and PostgreSQL, scanner agents answering
on scan-commands, and a clock sped up so that hours of scheduler time pass in seconds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from kairos.floor.db import connect, migrate
from schemas.api import Role
from schemas.base import ComplianceState
from schemas.state import HostStateChanged
from streams.projection import alerts
from streams.projection.writer import apply
from tests.integration.test_api import bearer, prepare, running_api
from tests.support.agents import ScannerFleet
from tests.support.factories import (
    config_updated,
    host_created,
    host_state_changed,
    schedule_enabled,
    schedule_triggered,
    schedule_upserted,
)
from tests.support.kafka import (
    Collector,
    allow_slow_answers,
    publish,
    start_producer,
    wait_until,
)
from tests.support.stack import unique_name

pytestmark = pytest.mark.integration

ALERTS = "/api/compliance/scheduler/alerts"


def alerts_of(records: Collector, topic: str) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Messages on the alerts topic by (alert type, subject), in the order they came."""
    found: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for message in records.values(topic):
        found[(message["alert_type"], message["subject_id"])].append(message)
    return found


def states(messages: list[dict[str, Any]]) -> list[str]:
    """The distinct (alert, state) changes, in order: redelivery may repeat one."""
    seen: list[tuple[str, str]] = []
    for message in messages:
        change = (message["alert_id"], message["state"])
        if change not in seen:
            seen.append(change)
    return [state for _, state in seen]


def first_alert(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of the first alert raised for one (alert type, subject)."""
    return [m for m in messages if m["alert_id"] == messages[0]["alert_id"]]


def config_version(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        try:
            row = conn.execute("SELECT version FROM scheduler_config").fetchone()
        except psycopg.errors.UndefinedTable:
            return 0  # The projector has not migrated the read model yet.
    return int(row[0]) if row else 0


def in_turn(scores: dict[str, list[float]]) -> Callable[[dict[str, Any]], float | None]:
    """Each host's scores in turn, then its last one forever."""
    answered: dict[str, int] = defaultdict(int)

    def score(command: dict[str, Any]) -> float | None:
        host = command["host_id"]
        sequence = scores.get(host, [100.0])
        answered[host] += 1
        return sequence[min(answered[host], len(sequence)) - 1]

    return score


async def test_a_score_fall_and_a_critical_host_raise_one_alert_each_and_resolve(
    make_settings, workers
) -> None:
    settings = make_settings(clock_speed=3600.0, clock_origin=datetime.now(UTC))
    workers(settings)
    tokens = await prepare(settings)
    topic = settings.topics.alerts
    scores = {"fall-1": [95.0, 40.0, 90.0], "crit-1": [70.0, 10.0, 100.0], "calm-1": [100.0]}
    producer = await start_producer(settings)
    await allow_slow_answers(settings, producer)  # A late score would be skipped by a retry.
    async with (
        Collector(settings, topic) as records,
        ScannerFleet(settings, score_for=in_turn(scores)) as fleet,
    ):
        for host in scores:
            await publish(producer, settings.topics.object_created, host, host_created(host))

        def resolved(kind: str, host: str) -> bool:
            return "resolved" in states(alerts_of(records, topic)[(kind, host)])

        await wait_until(
            lambda: (
                resolved("score_dropped", "fall-1")
                and resolved("became_critical", "crit-1")
                and resolved("score_dropped", "crit-1")
            ),
            timeout=60,
            what="the falls and the critical host to be alerted and resolved",
        )
        answered = {host: len(fleet.commands_for(host)) for host in scores}
    await producer.stop()

    published = alerts_of(records, topic)
    assert set(published) == {
        ("score_dropped", "fall-1"),
        ("score_dropped", "crit-1"),
        ("became_critical", "crit-1"),
    }, f"calm-1 raised nothing; answered {answered}"
    for messages in published.values():
        assert states(messages) == ["firing", "resolved"], messages
        assert len({m["alert_id"] for m in messages}) == 1
        assert [m["revision"] for m in messages][-1] == 2
    fall = published[("score_dropped", "fall-1")]
    assert (fall[0]["details"]["from_score"], fall[0]["details"]["to_score"]) == (95.0, 40.0)
    assert fall[-1]["resolution"] == "score recovered to 90"
    critical = published[("became_critical", "crit-1")]
    assert critical[0]["severity"] == "critical"
    assert critical[-1]["resolution"] == "compliance state is compliant"

    guest = bearer(tokens[Role.GUEST])
    async with running_api(settings) as client:
        listed = (await client.get(ALERTS, headers=guest)).json()
        for_host = (await client.get(ALERTS, params={"subject": "fall-1"}, headers=guest)).json()
        firing = (await client.get(ALERTS, params={"state": "firing"}, headers=guest)).json()
        refused = await client.get(ALERTS, params={"type": "nope"}, headers=guest)
    assert listed["count"] == 3 and listed["firing"] == 0 and firing["data"] == []
    (row,) = for_host["data"]
    assert (row["alert_type"], row["state"], row["resolution"]) == (
        "score_dropped",
        "resolved",
        "score recovered to 90",
    )
    assert str(row["alert_id"]) == fall[0]["alert_id"]
    assert refused.status_code == 422 and "type" in refused.text


async def test_past_promise_and_a_saturated_cap_are_alerted_then_resolved_by_scans(
    make_settings, workers
) -> None:
    # One scheduler minute per second: a 5-minute promise and a 1-minute cap threshold.
    settings = make_settings(
        clock_speed=60.0, clock_origin=datetime.now(UTC), alert_check_seconds=0.5
    )
    workers(settings)
    topic = settings.topics.alerts
    hosts = ["late-1", "late-2"]
    answering = {"on": False}
    producer = await start_producer(settings)
    config = config_updated(
        max_interval_minutes=5,
        max_concurrent_scans=1,
        alert_cap_saturated_minutes=1,
        scan_timeout_seconds=3600,
    )
    await publish(producer, settings.topics.schedule_changes, "config", config)
    await wait_until(
        lambda: config_version(settings.database_url) >= 1, timeout=30, what="the config applied"
    )
    async with (
        Collector(settings, topic) as records,
        ScannerFleet(settings, answer=lambda command: answering["on"]) as fleet,
    ):
        for host in hosts:
            await publish(producer, settings.topics.object_created, host, host_created(host))

        def firing() -> set[tuple[str, str]]:
            return {key for key, messages in alerts_of(records, topic).items() if messages}

        wanted = {
            ("past_promise", "late-1"),
            ("past_promise", "late-2"),
            ("cap_saturated", "fleet"),
        }
        await wait_until(lambda: wanted <= firing(), timeout=45, what=f"alerts {sorted(wanted)}")
        assert len(fleet.commands) == 1, "the cap of one holds the second host back"
        answering["on"] = True
        for command in list(fleet.commands):
            fleet.answer_later(command)

        def all_resolved() -> bool:
            published = alerts_of(records, topic)
            return all("resolved" in states(published[key]) for key in wanted)

        await wait_until(all_resolved, timeout=45, what="the alerts to be resolved")
    await producer.stop()

    published = alerts_of(records, topic)
    for key in wanted:
        # The 60x clock can take a host past its promise, or hold the cap, again once the
        # first alert resolved: a later alert may fire, but never while one still fires.
        changes = states(published[key])
        assert changes[:2] == ["firing", "resolved"], published[key]
        assert changes == (["firing", "resolved"] * len(changes))[: len(changes)], changes
    late = first_alert(published[("past_promise", "late-1")])
    assert late[0]["severity"] == "critical" and "past the promise" in late[0]["summary"]
    assert late[-1]["resolution"] == "scanned within the promise"
    cap = first_alert(published[("cap_saturated", "fleet")])
    assert (cap[0]["details"]["in_flight"], cap[0]["details"]["cap"]) == (1, 1)


async def test_a_schedule_that_disables_itself_is_alerted_until_enabled_again(
    make_settings, workers
) -> None:
    settings = make_settings()
    workers(settings)
    topic = settings.topics.alerts
    producer = await start_producer(settings)

    def fail_its_commands(command: dict[str, Any]) -> float | None:
        return None if command.get("schedule_id") == "brittle" else 100.0

    async with (
        Collector(settings, topic) as records,
        ScannerFleet(settings, score_for=fail_its_commands),
    ):
        await publish(producer, settings.topics.object_created, "box-1", host_created("box-1"))
        brittle = schedule_upserted(
            "brittle",
            recurrence={"kind": "none"},
            targets={"object_ids": ["box-1"]},
            max_retries=0,
        )
        await publish(producer, settings.topics.schedule_changes, "brittle", brittle)
        await publish(
            producer, settings.topics.schedule_changes, "brittle", schedule_triggered("brittle")
        )

        def messages() -> list[dict[str, Any]]:
            return alerts_of(records, topic)[("schedule_disabled", "brittle")]

        await wait_until(messages, timeout=45, what="the schedule_disabled alert")
        enable = schedule_enabled("brittle")
        await publish(producer, settings.topics.schedule_changes, "brittle", enable)
        await wait_until(
            lambda: "resolved" in states(messages()), timeout=30, what="the alert resolved"
        )
    await producer.stop()
    raised, *_, resolved = messages()
    assert raised["subject_type"] == "schedule" and raised["severity"] == "warning"
    assert "disabled itself" in raised["summary"]
    assert "disabled after 1 failed runs in a row" in raised["details"]["reason"]
    assert resolved["resolution"] == "schedule enabled again"
    assert states(messages()) == ["firing", "resolved"]


def scored(version: int, score: float, at: datetime, host_id: str = "h-1") -> HostStateChanged:
    state = ComplianceState.PARTIAL if score < 80 else ComplianceState.MOSTLY_COMPLIANT
    return host_state_changed(
        host_id,
        version,
        at=at,
        state=state,
        compliance_state=state,
        score=score,
        last_scan_completed=at,
    )


async def test_a_fall_and_its_recovery_in_one_batch_leave_one_resolved_alert_even_replayed(
    postgres_server: Callable[[str], str],
) -> None:
    dsn = postgres_server(unique_name("kairos_alerts_"))
    await migrate(dsn)
    t0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    batch = [scored(1, 95, t0), scored(2, 40, t0 + timedelta(hours=1))]
    recovered = [scored(3, 60, t0 + timedelta(hours=2)), scored(4, 90, t0 + timedelta(hours=3))]
    async with await connect(dsn) as conn:
        await apply([*batch, *recovered], conn)
        await apply([*batch, *recovered], conn)  # A replay after a crash changes nothing.
        await apply(batch, conn)
        rows = await (
            await conn.execute("SELECT alert_type, resolved_at, resolution, revision FROM alerts")
        ).fetchall()
        waiting = await alerts.unpublished(conn, 10)
    assert rows == [("score_dropped", t0 + timedelta(hours=3), "score recovered to 90", 2)]
    (message,) = waiting
    assert (message.state, message.revision, message.raised_at) == (
        "resolved",
        2,
        t0 + timedelta(hours=1),
    )


async def test_a_host_created_again_resolves_the_alerts_left_open_by_its_deleted_self(
    postgres_server: Callable[[str], str],
) -> None:
    """A deletion that came in the new incarnation's batch, or never reached the read model,
    still resolves the alerts the deleted host left open; the new host starts with none."""
    dsn = postgres_server(unique_name("kairos_alerts_"))
    await migrate(dsn)
    t0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    again = t0 + timedelta(days=1)

    def created_again(host_id: str) -> HostStateChanged:
        return host_state_changed(host_id, 1, at=again, created_at=again, score=90.0)

    fallen = {
        host_id: [scored(1, 95, t0, host_id), scored(2, 40, t0 + timedelta(hours=1), host_id)]
        for host_id in ("h-together", "h-lost")
    }
    async with await connect(dsn) as conn:
        await apply([*fallen["h-together"], *fallen["h-lost"]], conn)
        deletion = HostStateChanged(
            host_id="h-together", version=3, schedule=None, changed_at=t0 + timedelta(hours=2)
        )
        await apply([deletion, created_again("h-together")], conn)
        await apply([created_again("h-lost")], conn)
        rows = await (
            await conn.execute(
                "SELECT subject_id, alert_type, raised_at, resolved_at, resolution FROM alerts"
                " ORDER BY subject_id"
            )
        ).fetchall()
    assert rows == [
        (host_id, "score_dropped", t0 + timedelta(hours=1), again, "host deleted")
        for host_id in ("h-lost", "h-together")
    ]


async def test_hosts_in_one_batch_keep_their_own_alert_order_side_by_side(
    postgres_server: Callable[[str], str],
) -> None:
    """Alert rows of many hosts are written a step at a time; each host's order still holds."""
    dsn = postgres_server(unique_name("kairos_alerts_"))
    await migrate(dsn)
    t0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    hour = timedelta(hours=1)
    changes = []
    for n in range(1, 7):
        host_id = f"h-{n}"
        changes += [scored(1, 95, t0, host_id), scored(2, 40, t0 + hour, host_id)]
        changes.append(scored(3, 90, t0 + 2 * hour, host_id))  # Recovered: resolved.
        if n % 2 == 0:  # Even hosts fall again: a second alert, after the resolve.
            changes.append(scored(4, 30, t0 + 3 * hour, host_id))
    async with await connect(dsn) as conn:
        await apply(changes, conn)
        rows = await (
            await conn.execute(
                "SELECT subject_id, raised_at, resolved_at FROM alerts"
                " WHERE alert_type = 'score_dropped' ORDER BY subject_id, raised_at"
            )
        ).fetchall()
    expected = []
    for n in range(1, 7):
        expected.append((f"h-{n}", t0 + hour, t0 + 2 * hour))
        if n % 2 == 0:
            expected.append((f"h-{n}", t0 + 3 * hour, None))
    assert rows == expected


async def test_alert_changes_left_unpublished_are_sent_when_a_projector_runs_again(
    make_settings, projectors
) -> None:
    settings = make_settings()
    await prepare(settings)  # Topics and the read model, as a worker makes them.
    raised_at = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    async with await connect(settings.database_url) as conn:
        # Left by a projector that stopped (or lost Kafka) before the broker acknowledged them.
        await conn.execute(
            "INSERT INTO alerts (alert_id, alert_type, subject_type, subject_id, severity, summary,"
            " raised_at, resolved_at, resolution, revision, published_revision) VALUES"
            " (gen_random_uuid(), 'became_critical', 'host', 'h-1', 'critical', 'h-1 is critical',"
            " %(at)s, NULL, NULL, 1, 0),"
            " (gen_random_uuid(), 'score_dropped', 'host', 'h-2', 'warning', 'h-2 fell',"
            " %(at)s, %(at)s, 'score recovered to 90', 2, 1)",
            {"at": raised_at},
        )
        await conn.commit()
    topic = settings.topics.alerts
    async with Collector(settings, topic) as records:
        projectors(settings)
        await records.wait_for(
            lambda: len(records.values(topic)) >= 2, timeout=30, what="both alert changes"
        )
    sent = {m["subject_id"]: (m["state"], m["revision"]) for m in records.values(topic)}
    assert sent == {"h-1": ("firing", 1), "h-2": ("resolved", 2)}

    def all_acknowledged() -> bool:
        with psycopg.connect(settings.database_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM alerts WHERE published_revision < revision"
            ).fetchone()
        return row is not None and row[0] == 0

    await wait_until(all_acknowledged, timeout=10, what="the rows marked as published")
