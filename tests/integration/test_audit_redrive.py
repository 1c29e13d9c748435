"""The audit trail and dead-letter redrive through a real `kairos worker` (with its projector)
on a real broker and PostgreSQL: a host event the worker refused is redriven with a fixed body
and the host appears; every change names the token that made it."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from kairos.floor.settings import Settings
from schemas.api import Role
from tests.integration.test_api import P, bearer, prepare, running_api
from tests.integration.test_api_worker import eventually
from tests.support.factories import host_created
from tests.support.kafka import publish, start_producer

pytestmark = pytest.mark.integration

J = "/api/scheduled-jobs"
ADMIN_NAME = "tester-security_admin"


async def audit(client: httpx.AsyncClient, headers: dict[str, str], **query: Any) -> list[Any]:
    response = await client.get(f"{P}/audit", params=query, headers=headers)
    assert response.status_code == 200, response.text
    return list(response.json()["data"])


async def test_a_refused_host_event_redriven_with_a_fixed_body_creates_the_host(
    settings: Settings, workers
) -> None:
    tokens = await prepare(settings)
    workers(settings)
    admin, analyst = bearer(tokens[Role.SECURITY_ADMIN]), bearer(tokens[Role.SECURITY_ANALYST])
    producer = await start_producer(settings)
    fixed = json.loads(host_created("fixed-1", organization="acme").model_dump_json())
    broken = {key: value for key, value in fixed.items() if key != "occurred_at"}
    try:
        async with running_api(settings) as client:
            await publish(
                producer, settings.topics.object_created, "fixed-1", json.dumps(broken).encode()
            )
            letters = await eventually(
                client, f"{P}/dead-letters", admin, lambda body: body["count"] >= 1
            )
            letter = letters["data"][0]
            assert letter["key"] == "fixed-1" and letter["redriven_at"] is None
            redrive = f"{P}/dead-letters/{letter['event_id']}/redrive"

            # Analysts may not; an edited body is checked against ObjectEvent first.
            response = await client.post(redrive, json={"body": fixed}, headers=analyst)
            assert response.status_code == 403
            response = await client.post(redrive, json={"body": broken}, headers=admin)
            assert response.status_code == 422, response.text
            assert [e["field"] for e in response.json()["errors"]] == ["body.occurred_at"]
            missing = f"{P}/dead-letters/{uuid.uuid4()}/redrive"
            assert (await client.post(missing, headers=admin)).status_code == 404

            response = await client.post(redrive, json={"body": fixed}, headers=admin)
            assert response.status_code == 200, response.text
            receipt = response.json()
            assert receipt["topic"] == settings.topics.object_created
            assert receipt["key"] == "fixed-1" and receipt["redriven_by"] == ADMIN_NAME
            assert receipt["redrive_event_id"] == fixed["event_id"]
            host = await eventually(client, f"{P}/hosts/fixed-1", admin, lambda body: True)
            assert host["organization"] == "acme"

            # A second redrive is refused unless forced.
            response = await client.post(redrive, json={"body": fixed}, headers=admin)
            assert response.status_code == 409, response.text
            shown = (await client.get(f"{P}/dead-letters", headers=admin)).json()["data"]
            mine = next(d for d in shown if d["event_id"] == letter["event_id"])
            assert mine["redriven_by"] == ADMIN_NAME
            assert mine["redrive_event_id"] == fixed["event_id"]

            # A host made through the API, a schedule created, paused and resumed.
            response = await client.post(
                f"{P}/hosts", json={"host_id": "api-1"}, headers=admin, params={"wait": "true"}
            )
            assert response.status_code in (200, 202), response.text
            body = {
                "name": "weekly",
                "scanner": "compliance",
                "recurrence": {"kind": "cron", "expression": "0 3 * * 1"},
            }
            response = await client.post(J, json=body, headers=admin, params={"wait": "true"})
            assert response.status_code == 200, response.text
            response = await client.post(
                f"{J}/weekly/pause", json={"note": "freeze"}, headers=admin
            )
            assert response.status_code in (200, 202), response.text

            paused = await eventually(
                client,
                f"{P}/audit",
                analyst,
                lambda page: any(e["type"] == "schedule.paused" for e in page["data"]),
                params={"subject": "weekly"},
            )
            kinds = [entry["type"] for entry in paused["data"]]
            assert kinds == ["schedule.paused", "schedule.upserted"]
            assert {entry["actor"] for entry in paused["data"]} == {ADMIN_NAME}
            assert paused["data"][0]["summary"]["note"] == "freeze"
            job = (await client.get(f"{J}/weekly", headers=analyst)).json()
            assert job["created_by"] == ADMIN_NAME and job["updated_by"] == ADMIN_NAME

            created = await eventually(
                client,
                f"{P}/audit",
                analyst,
                lambda page: page["count"] == 1,
                params={"subject": "api-1", "type": "host.created"},
            )
            assert created["data"][0]["actor"] == ADMIN_NAME
            assert created["data"][0]["subject_kind"] == "host"
            # The redriven event carries no actor (no header): the redrive itself names who.
            fixed_rows = await audit(client, analyst, subject="fixed-1")
            assert [(e["type"], e["actor"]) for e in fixed_rows] == [("host.created", None)]
            redriven = await audit(client, analyst, type="dead_letter.redriven")
            assert [(e["subject_id"], e["actor"]) for e in redriven] == [
                (letter["event_id"], ADMIN_NAME)
            ]
            tokens_made = await audit(client, analyst, type="token.created")
            assert {e["subject_id"] for e in tokens_made} == {
                f"tester-{r.name.lower()}" for r in Role
            }

            # Filters: actor, time range, and cursor pages that visit every row once.
            mine_only = await audit(client, analyst, actor=ADMIN_NAME, limit=1000)
            assert mine_only and all(e["actor"] == ADMIN_NAME for e in mine_only)
            later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
            assert await audit(client, analyst, since=later) == []
            everything = await audit(client, analyst, limit=1000)
            seen: list[str] = []
            cursor = None
            while True:
                params: dict[str, Any] = {"limit": 3}
                if cursor:
                    params["cursor"] = cursor
                page = (await client.get(f"{P}/audit", params=params, headers=analyst)).json()
                seen += [e["event_id"] for e in page["data"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert seen == [e["event_id"] for e in everything]
            guest = bearer(tokens[Role.GUEST])
            assert (await client.get(f"{P}/audit", headers=guest)).status_code == 403
    finally:
        await producer.stop()
