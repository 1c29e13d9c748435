"""Deactivating, reactivating and deleting a host through the API, in front of a real
`kairos worker`: each is an `object-created` event the worker folds like inventory's own, and
`?wait=true` answers once the read model shows it."""

from __future__ import annotations

import json

import pytest

from kairos.floor.db import connect
from kairos.floor.settings import Settings
from schemas.api import Role
from tests.integration.test_api import P, bearer, prepare, running_api

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

HOST = {
    "host_id": "web-1",
    "hostname": "web-1.example.test",
    "ip": "10.0.0.7",
    "os": "debian-12",
    "organization": "acme",
    "labels": {"env": "prod", "team": "web"},
}


async def stored_attributes(settings: Settings, host_id: str) -> dict[str, object]:
    async with await connect(settings.database_url) as conn:
        cursor = await conn.execute(
            "SELECT attributes, labels FROM host_schedule WHERE host_id = %s", (host_id,)
        )
        row = await cursor.fetchone()
    assert row is not None
    return {**row[0], "labels": row[1]}


async def test_a_host_is_deactivated_reactivated_and_deleted_keeping_its_attributes(
    settings: Settings, workers
) -> None:
    tokens = await prepare(settings)
    workers(settings)
    admin, analyst = bearer(tokens[Role.SECURITY_ADMIN]), bearer(tokens[Role.SECURITY_ANALYST])
    guest = bearer(tokens[Role.GUEST])
    async with running_api(settings) as client:
        created = await client.post(f"{P}/hosts", params={"wait": "true"}, json=HOST, headers=admin)
        assert created.status_code == 200, created.text
        first = created.json()
        assert first["is_active"] is True

        # The same roles as the other inventory writes; unknown hosts are 404.
        for path in ("web-1/deactivate", "web-1/reactivate"):
            refused = await client.post(f"{P}/hosts/{path}", headers=analyst)
            assert refused.status_code == 403, refused.text
        assert (await client.delete(f"{P}/hosts/web-1", headers=analyst)).status_code == 403
        for method, path in (
            ("POST", "nope/deactivate"),
            ("POST", "nope/reactivate"),
            ("DELETE", "nope"),
        ):
            missing = await client.request(method, f"{P}/hosts/{path}", headers=admin)
            assert missing.status_code == 404, (method, path, missing.text)
            assert missing.json()["detail"] == "host 'nope' is not in the read model"

        deactivated = await client.post(
            f"{P}/hosts/web-1/deactivate", params={"wait": "true"}, headers=admin
        )
        assert deactivated.status_code == 200, deactivated.text
        host = deactivated.json()
        assert host["is_active"] is False and host["version"] > first["version"]
        assert deactivated.headers["kairos-event-id"]
        # Everything else inventory said is kept, what the API does not show included.
        assert (host["hostname"], host["organization"], host["labels"]) == (
            HOST["hostname"],
            HOST["organization"],
            HOST["labels"],
        )
        kept = await stored_attributes(settings, "web-1")
        assert (kept["ip"], kept["os"], kept["is_active"]) == (HOST["ip"], HOST["os"], False)
        inactive = await client.get(f"{P}/hosts", headers=guest)
        assert [(h["host_id"], h["is_active"]) for h in inactive.json()["data"]] == [
            ("web-1", False)
        ]

        # Without wait: 202 and the event id, as every write.
        reactivated = await client.post(f"{P}/hosts/web-1/reactivate", headers=admin)
        assert reactivated.status_code == 202, reactivated.text
        assert reactivated.json()["event_id"] == reactivated.headers["kairos-event-id"]
        again = await client.post(
            f"{P}/hosts/web-1/reactivate", params={"wait": "true"}, headers=admin
        )
        assert again.status_code == 200, again.text
        assert again.json()["is_active"] is True
        kept = await stored_attributes(settings, "web-1")
        assert (kept["ip"], kept["os"], kept["labels"]) == (HOST["ip"], HOST["os"], HOST["labels"])

        deleted = await client.delete(f"{P}/hosts/web-1", params={"wait": "true"}, headers=admin)
        assert deleted.status_code == 200, deleted.text
        assert deleted.json() == {
            "event_id": deleted.headers["kairos-event-id"],
            "status": "deleted",
        }
        assert (await client.get(f"{P}/hosts/web-1", headers=guest)).status_code == 404
        assert (await client.get(f"{P}/hosts", headers=guest)).json()["count"] == 0
        gone = await client.delete(f"{P}/hosts/web-1", headers=admin)
        assert gone.status_code == 404, gone.text

        # Created again under the same id, it is a new host.
        back = await client.post(f"{P}/hosts", params={"wait": "true"}, json=HOST, headers=admin)
        assert back.status_code == 200, back.text
        assert back.json()["is_active"] is True


async def test_kairos_hosts_deactivate_reactivate_and_delete_through_the_api(
    settings: Settings, workers
) -> None:
    from typer.testing import CliRunner

    from kairos.cli import app
    from tests.integration.test_console import serving

    tokens = await prepare(settings)
    workers(settings)
    runner = CliRunner()
    with serving(settings) as base:

        def kairos(*args: str, role: Role = Role.SECURITY_ADMIN) -> tuple[int, str]:
            env = {"KAIROS_API_URL": base, "KAIROS_TOKEN": tokens[role]}
            run = runner.invoke(app, list(args), env=env)
            return run.exit_code, run.output.strip()

        assert kairos("hosts", "add", "web-2", "--hostname", "two.example", "--wait") == (
            0,
            "added web-2: state unknown",
        )
        assert kairos("hosts", "deactivate", "web-2") == (0, "web-2: inactive")
        code, output = kairos("hosts", "show", "web-2", "--json", role=Role.GUEST)
        assert code == 0 and json.loads(output)["is_active"] is False
        assert json.loads(output)["hostname"] == "two.example"
        assert kairos("hosts", "reactivate", "web-2") == (0, "web-2: active")
        assert kairos("hosts", "deactivate", "nope")[0] == 4
        assert kairos("hosts", "delete", "web-2", role=Role.SECURITY_ANALYST)[0] == 3
        code, output = kairos("hosts", "delete", "web-2", "--json")
        assert code == 0 and json.loads(output)["status"] == "deleted"
        assert kairos("hosts", "show", "web-2", role=Role.GUEST)[0] == 4
        assert kairos("hosts", "delete", "web-2")[0] == 4
