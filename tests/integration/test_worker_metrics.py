"""A worker's /metrics moves while commands flow, and /healthz answers for a live worker."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import httpx
import pytest

from kairos.floor.settings import Settings
from kairos.localstack.ports import free_port
from schemas.topics import CONFIG_KEY
from tests.support.agents import ScannerFleet, always
from tests.support.factories import config_updated, host_created
from tests.support.kafka import start_producer, wait_until

pytestmark = pytest.mark.integration

HOSTS = 30


def sample(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_lateness_histogram_and_counters_move_while_commands_flow(
    make_settings, workers
) -> None:
    settings: Settings = make_settings(
        metrics_port=free_port(), clock_speed=600.0, clock_origin=datetime.now(UTC)
    )
    url = f"http://127.0.0.1:{settings.metrics_port}"
    names = settings.topics
    workers(settings)
    producer = await start_producer(settings)
    try:
        await producer.send_and_wait(
            names.schedule_changes,
            config_updated(interval_critical=15).model_dump_json().encode(),
            key=CONFIG_KEY.encode(),
        )
        async with httpx.AsyncClient(base_url=url, timeout=5) as client:
            assert (await client.get("/healthz")).json() == {"status": "ok"}
            before = (await client.get("/metrics")).text
            async with ScannerFleet(settings, score_for=always(0)) as fleet:
                for n in range(HOSTS):
                    host = f"metered-{n}"
                    await producer.send(
                        names.object_created,
                        host_created(host).model_dump_json().encode(),
                        key=host.encode(),
                    )
                await producer.flush()
                await wait_until(
                    lambda: len(fleet.commands) >= 3 * HOSTS, timeout=60, what="three rounds"
                )
                after = (await client.get("/metrics")).text
        assert sample(after, "kairos_dispatch_lateness_seconds_count") > sample(
            before, "kairos_dispatch_lateness_seconds_count"
        )
        assert sample(after, "kairos_dispatch_lateness_seconds_count") >= 2 * HOSTS
        assert sample(after, "kairos_results_applied_total") >= HOSTS
        assert sample(after, 'kairos_commands_issued_total{reason="unknown"}') == HOSTS
        assert sample(after, 'kairos_commands_issued_total{reason="scheduled"}') >= HOSTS
        assert sample(after, "kairos_dispatcher_owned") == 1
        assert sample(after, "kairos_hosts") == HOSTS
        assert 'kairos_consumer_lag{topic="' in after
        assert sample(after, "kairos_recovery_duration_seconds") > 0
    finally:
        await producer.stop()
