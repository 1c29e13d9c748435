"""`kairos projector` keeps the read model on its own, beside workers that do not project."""

from __future__ import annotations

import asyncio
import signal

import psycopg
import pytest

from kairos.floor.settings import Settings
from tests.support.factories import host_created
from tests.support.kafka import Collector, hosts_changelog, start_producer, wait_until

pytestmark = pytest.mark.integration

HOSTS = [f"apart-{number:02d}" for number in range(20)]


def projected_hosts(settings: Settings) -> set[str]:
    with psycopg.connect(settings.database_url) as conn:
        rows = conn.execute("SELECT host_id FROM host_schedule").fetchall()
    return {host_id for (host_id,) in rows}


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["term", "ctrl-c"])
async def test_projector_process_projects_what_a_worker_without_projector_leaves_unwritten(
    make_settings, workers, projectors, stop_signal: signal.Signals
) -> None:
    settings = make_settings(projector_enabled=False)
    worker = workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    try:
        async with Collector(settings, hosts_changelog(settings)) as host_state:
            for host in HOSTS:
                await producer.send(
                    names.object_created,
                    host_created(host).model_dump_json().encode(),
                    key=host.encode(),
                )
            await producer.flush()
            await host_state.wait_for(
                lambda: (
                    {state["host_id"] for state in host_state.host_states(settings)} >= set(HOSTS)
                ),
                timeout=60,
                what="the worker's state change for every host",
            )
        # An in-worker projector writes a batch within a poll of it reaching the topic.
        await asyncio.sleep(3.0)
        assert projected_hosts(settings) == set(), "the worker projected despite the setting"

        projector = projectors(settings)
        await wait_until(
            lambda: projected_hosts(settings) == set(HOSTS),
            timeout=60,
            what="the projector process to write every host",
        )
    finally:
        await producer.stop()

    projector.stop(stop_signal)
    assert projector.process.returncode == 0, projector.log()[-4000:]
    assert "Traceback" not in projector.log()
    assert "projector stopped" in projector.log()
    assert worker.process.poll() is None, "the worker must not depend on the projector"
