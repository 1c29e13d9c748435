"""What an operator sees of claims waiting behind a saturated cap, through the API in front of
a real worker and its projector: `/status` counts them as waiting, and as held while the
scheduler is off; a claim withdrawn by maintenance shows in the host's history with its
reason."""

from __future__ import annotations

import pytest

from kairos.floor.settings import Settings
from schemas.api import Role
from tests.integration.test_api import P, bearer, prepare, running_api
from tests.integration.test_api_worker import eventually
from tests.support.factories import host_created
from tests.support.kafka import publish, start_producer

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


async def test_status_and_history_show_held_and_withdrawn_claims(
    settings: Settings, workers
) -> None:
    tokens = await prepare(settings)
    workers(settings)
    admin, guest = bearer(tokens[Role.SECURITY_ADMIN]), bearer(tokens[Role.GUEST])
    producer = await start_producer(settings)
    async with running_api(settings) as client:
        response = await client.put(
            f"{P}/config",
            params={"wait": "true"},
            json={"max_concurrent_scans": 1, "initial_spread_seconds": 0},
            headers=admin,
        )
        assert response.status_code == 200, response.text
        # Nobody answers: the first host's command holds the only slot, the others wait.
        for host_id in ("blocker", "waiting-1", "maint-1"):
            await publish(producer, settings.topics.object_created, host_id, host_created(host_id))
        status = await eventually(
            client,
            f"{P}/status",
            guest,
            lambda body: body["in_flight"] == 3 and body["waiting"] == 2,
        )
        assert status["held"] == 0 and status["enabled"] is True

        response = await client.post(
            f"{P}/toggle", params={"enabled": "false", "wait": "true"}, headers=admin
        )
        assert response.status_code == 200, response.text
        status = await eventually(client, f"{P}/status", guest, lambda body: body["held"] == 2)
        assert status["enabled"] is False and status["waiting"] == 2

        response = await client.put(
            f"{P}/hosts/maint-1/maintenance",
            params={"wait": "true"},
            json={"enabled": True},
            headers=admin,
        )
        assert response.status_code == 200, response.text
        history = await eventually(
            client,
            f"{P}/hosts/maint-1/history",
            guest,
            lambda body: any(entry["kind"] == "withdrawn" for entry in body["data"]),
        )
        [withdrawn] = history["data"]
        assert withdrawn["reason"] == "maintenance" and withdrawn["host_id"] == "maint-1"
        assert history["count"] == 1
        status = await eventually(client, f"{P}/status", guest, lambda body: body["held"] == 1)
        assert status["in_flight"] == 2

        response = await client.post(
            f"{P}/toggle", params={"enabled": "true", "wait": "true"}, headers=admin
        )
        assert response.status_code == 200, response.text
        status = await eventually(
            client, f"{P}/status", guest, lambda body: body["enabled"] and body["held"] == 0
        )
        assert status["waiting"] == 1  # still behind the blocker: the cap binds
    await producer.stop()
