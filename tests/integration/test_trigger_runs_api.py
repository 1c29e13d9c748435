"""A run fired by an event trigger, read through the API in front of a real worker: it shows
in the schedule's history with its reason, its command, and how it ended."""

from __future__ import annotations

import pytest

from kairos.floor.settings import Settings
from schemas.api import Role
from tests.integration.test_api import bearer, prepare, running_api
from tests.integration.test_api_worker import eventually
from tests.support.agents import ScannerFleet
from tests.support.factories import host_created, schedule_upserted
from tests.support.kafka import publish, start_producer, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

J = "/api/scheduled-jobs"


async def test_a_trigger_run_shows_in_the_schedule_history(settings: Settings, workers) -> None:
    tokens = await prepare(settings)
    workers(settings)
    guest = bearer(tokens[Role.GUEST])
    names = settings.topics
    producer = await start_producer(settings)
    on_create = schedule_upserted(
        "on-create",
        recurrence={"kind": "none"},
        trigger={"run_on": "host", "operation": "created"},
    )
    async with ScannerFleet(settings) as fleet, running_api(settings) as client:
        await publish(producer, names.schedule_changes, "on-create", on_create)
        await eventually(client, f"{J}/on-create", guest, lambda body: body["version"] >= 1)
        await publish(producer, names.object_created, "new-web", host_created("new-web"))
        await wait_until(
            lambda: any(c.get("schedule_id") == "on-create" for c in fleet.commands),
            timeout=30,
            what="the trigger's command",
        )
        history = await eventually(
            client,
            f"{J}/on-create/history",
            guest,
            lambda body: body["count"] >= 1,
        )
    await producer.stop()
    [run] = history["data"]
    assert run["reason"] == "trigger"
    assert run["commands_issued"] == 1 and run["hosts_matched"] == 1
