"""Trend alerts end to end: a real worker (with its projector) on a real broker and PostgreSQL,
scanner agents answering on scan-commands, and a clock sped up so that a day of scheduler time
passes in seconds. A host whose score falls scan after scan, and an organization whose average
falls over a day, are each alerted once on the `alerts` topic and resolved when the trend turns.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.integration.test_alerts import alerts_of, config_version, in_turn, states
from tests.support.agents import ScannerFleet
from tests.support.factories import config_updated, host_created
from tests.support.kafka import Collector, allow_slow_answers, publish, start_producer, wait_until

pytestmark = pytest.mark.integration

SPEED = 14_400.0
"""Four scheduler hours a second: scans every 30 scheduler minutes come 8 a second."""


async def test_a_falling_host_and_a_falling_organization_are_alerted_then_resolved(
    make_settings, workers
) -> None:
    origin = datetime.now(UTC)
    settings = make_settings(clock_speed=SPEED, clock_origin=origin, alert_check_seconds=0.25)
    workers(settings)
    topic = settings.topics.alerts
    producer = await start_producer(settings)
    await allow_slow_answers(settings, producer)
    config = config_updated(
        interval_critical=15,
        interval_low=30,
        interval_partial=30,
        interval_mostly_compliant=30,
        interval_compliant=60,
        alert_trend_scans=3,
        # Both acme hosts must have fallen (one alone moves the average 12.5 points).
        alert_org_trend_points=15,
    )
    await publish(producer, settings.topics.schedule_changes, "config", config)
    await wait_until(
        lambda: config_version(settings.database_url) >= 1, timeout=30, what="the config applied"
    )
    sliding = in_turn({"slide-1": [90.0, 85.0, 80.0, 75.0, 70.0, 78.0], "calm-1": [90.0]})

    first_scan: dict[str, datetime] = {}

    def score(command: dict[str, Any]) -> float | None:
        if command["host_id"].startswith("acme-"):
            # From acme's first scan: 95 for a day and more, 70 for ten hours, then 85.
            at = datetime.fromisoformat(command["issued_at"])
            issued = at - first_scan.setdefault("at", at)
            if issued < timedelta(hours=26):
                return 95.0
            return 70.0 if issued < timedelta(hours=36) else 85.0
        return sliding(command)

    hosts = {"slide-1": None, "calm-1": None, "acme-1": "acme", "acme-2": "acme"}
    async with (
        Collector(settings, topic) as records,
        ScannerFleet(settings, score_for=score),
    ):
        for host, organization in hosts.items():
            event = host_created(host, organization=organization)
            await publish(producer, settings.topics.object_created, host, event)

        def resolved(kind: str, subject: str) -> bool:
            return "resolved" in states(alerts_of(records, topic)[(kind, subject)])

        try:
            await wait_until(
                lambda: (
                    resolved("score_falling", "slide-1") and resolved("org_score_falling", "acme")
                ),
                timeout=60,
                what="the falling host and organization to be alerted and resolved",
            )
        except AssertionError as error:
            raise AssertionError(f"{error}; {_seen(settings, records, topic)}") from None
    await producer.stop()

    published = alerts_of(records, topic)
    trends = {key for key in published if key[0] in ("score_falling", "org_score_falling")}
    assert trends == {("score_falling", "slide-1"), ("org_score_falling", "acme")}
    host = published[("score_falling", "slide-1")]
    assert states(host) == ["firing", "resolved"]
    assert host[0]["details"] == {"scores": [90.0, 85.0, 80.0, 75.0], "scans": 3}
    assert host[0]["subject_type"] == "host"
    assert host[-1]["resolution"] == "score rose to 78"
    organization = published[("org_score_falling", "acme")]
    assert states(organization) == ["firing", "resolved"]
    assert organization[0]["subject_type"] == "organization"
    details = organization[0]["details"]
    assert (details["from_average"], details["to_average"]) == (95.0, 70.0)
    # The first host back at 85 lifts the average above 70 (77.5), or both do (85).
    assert organization[-1]["resolution"] in (
        "average score climbing again: 77.5",
        "average score climbing again: 85",
    )


def _seen(settings: Any, records: Any, topic: str) -> str:
    """What the alerts topic and the read model hold, for a failure's message."""
    with psycopg.connect(settings.database_url) as conn:
        scans = conn.execute(
            "SELECT host_id, count(*), array_agg(score ORDER BY completed_at)"
            " FROM scan_results GROUP BY host_id"
        ).fetchall()
        alerts = conn.execute("SELECT alert_type, subject_id, resolved_at FROM alerts").fetchall()
    return f"alerts topic {sorted(alerts_of(records, topic))}; scans {scans}; alerts {alerts}"
