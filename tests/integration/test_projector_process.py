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
                lambda: {state.host_id for state in host_state.host_states(settings)} >= set(HOSTS),
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


def progress_rows(settings: Settings) -> dict[str, tuple[int, float]]:
    with psycopg.connect(settings.database_url) as conn:
        rows = conn.execute(
            "SELECT source, consumer_lag, lag_seconds FROM projection_progress"
        ).fetchall()
    return {source: (lag, seconds) for source, lag, seconds in rows}


async def test_projectors_sharing_the_group_record_progress_per_partition(
    make_settings, workers, projectors
) -> None:
    """Two projectors in one group each record the partitions they read, where a row for all
    of them was overwritten by whichever applied a batch last."""
    settings = make_settings(projector_enabled=False)
    workers(settings)
    first, second = projectors(settings), projectors(settings)
    changelog = hosts_changelog(settings)
    expected = {f"{changelog}:{partition}" for partition in range(settings.partitions)}
    producer = await start_producer(settings)
    published: list[str] = []
    try:
        # A host a second, until every partition of the changelog has been read and recorded
        # (the two projectors join the group while the first hosts come in).
        for number in range(120):
            host = f"shared-{number:03d}"
            await producer.send_and_wait(
                settings.topics.object_created,
                host_created(host).model_dump_json().encode(),
                key=host.encode(),
            )
            published.append(host)
            if expected <= set(progress_rows(settings)):
                break
            await asyncio.sleep(1.0)
        await wait_until(
            lambda: projected_hosts(settings) == set(published),
            timeout=60,
            what="the projectors to write every host",
        )
        await wait_until(
            lambda: all(lag == 0 for lag, _ in progress_rows(settings).values()),
            timeout=30,
            what="every recorded partition to be caught up",
        )
    finally:
        await producer.stop()

    rows = progress_rows(settings)
    assert expected <= set(rows), f"partitions without progress: {sorted(expected - set(rows))}"
    assert "projector" not in rows
    assert all(seconds >= 0 for _, seconds in rows.values())
    for projector in (first, second):
        assert projector.process.poll() is None, projector.log()[-4000:]
        assert "Traceback" not in projector.log()
