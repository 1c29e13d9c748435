"""Versioned schedule writes through the API in front of a real worker and its projector: the
read model lags, so two PATCHes with the same If-Match sent at once both pass the API's check;
the worker lets exactly one land, and `?wait=true` answers the other 412. Two creates of one
name sent at once: one lands, the other is answered 409. The refusals show on the schedule."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kairos.floor.settings import Settings
from schemas.api import Role
from tests.integration.test_api import bearer, prepare, running_api
from tests.integration.test_api_worker import eventually
from tests.support.scanners import put_scanners
from tests.support.schedules import suspended

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

J = "/api/scheduled-jobs"


def job(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "scanner": "nmap",
        "recurrence": {"kind": "cron", "expression": "0 0 1 1 *"},
        **fields,
    }


async def test_two_patches_with_the_same_if_match_exactly_one_lands(
    make_settings: Any, workers: Any, projectors: Any
) -> None:
    settings: Settings = make_settings(projector_enabled=False)
    tokens = await prepare(settings)
    workers(settings)
    projector = projectors(settings.model_copy(update={"projector_enabled": True}))
    admin, guest = bearer(tokens[Role.SECURITY_ADMIN]), bearer(tokens[Role.GUEST])
    async with running_api(settings) as client:
        await put_scanners(client, admin, "nmap")
        created = await client.post(J, params={"wait": "true"}, json=job("edited"), headers=admin)
        assert created.status_code == 200, created.text
        etag = (await client.get(f"{J}/edited", headers=guest)).headers["ETag"]

        # The read model stands still: both changes pass the API's check of the same version.
        with suspended(projector):
            answers = [
                await client.patch(f"{J}/edited", json=change, headers={**admin, "If-Match": etag})
                for change in ({"description": "from the first operator"}, {"priority": 7})
            ]
        assert [answer.status_code for answer in answers] == [202, 202]
        final = await eventually(client, f"{J}/edited", guest, lambda body: body["refused_changes"])
        definition = final["definition"]
        assert definition.get("description") == "from the first operator"
        assert definition.get("priority") != 7, "the second change, based on the same version"
        [refused] = final["refused_changes"]
        assert refused["reason"].startswith("stale write")
        assert refused["type"] == "schedule.upserted"
        assert refused["event_id"] == answers[1].json()["event_id"]

        # With ?wait=true, the change the worker refuses is answered 412.
        etag = (await client.get(f"{J}/edited", headers=guest)).headers["ETag"]
        with suspended(projector):
            first = await client.patch(
                f"{J}/edited", json={"description": "again"}, headers={**admin, "If-Match": etag}
            )
            waiting = asyncio.create_task(
                client.patch(
                    f"{J}/edited",
                    params={"wait": "true"},
                    json={"priority": 8},
                    headers={**admin, "If-Match": etag},
                )
            )
            await asyncio.sleep(0.5)
        second = await waiting
        assert first.status_code == 202
        assert second.status_code == 412, second.text
        assert second.json()["detail"].startswith("stale write")

        # Two creates of one name: the worker refuses the second, answered 409.
        with suspended(projector):
            first = await client.post(J, json=job("twice"), headers=admin)
            waiting = asyncio.create_task(
                client.post(
                    J, params={"wait": "true"}, json=job("twice", description="b"), headers=admin
                )
            )
            await asyncio.sleep(0.5)
        second = await waiting
        assert first.status_code == 202
        assert second.status_code == 409, second.text
        twice = await eventually(client, f"{J}/twice", guest, lambda body: body["refused_changes"])
        assert twice["refused_changes"][0]["reason"].startswith("schedule exists")
        assert twice["definition"].get("description") != "b"
