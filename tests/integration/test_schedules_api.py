"""The scheduled-jobs API: validation at the door, writes as events, reads from projection."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from api.routes.jobs import SCHEDULE_EXAMPLES, UPDATE_EXAMPLES
from kairos.devstack import wait_http_ok
from kairos.floor.settings import Settings
from kairos.localstack.ports import free_port
from schemas.api import Role
from schemas.schedules import Schedule
from tests.integration.test_api import api_settings, bearer, prepare, running_api
from tests.support.factories import host_created
from tests.support.kafka import Collector, publish, start_producer
from tests.support.scanners import put_scanners, register_scanners
from tests.support.stack import kairos_executable, settings_env

pytestmark = pytest.mark.integration

J = "/api/scheduled-jobs"


def job(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "scanner": "nmap",
        "recurrence": {"kind": "cron", "expression": "0 * * * *"},
        **fields,
    }


async def test_writes_validate_and_publish_keyed_by_name(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> None:
    settings = api_settings(bootstrap_servers, postgres_server, broker_kind)
    tokens = await prepare(settings)
    # No worker applies events here: nmap is registered in the read model directly.
    await register_scanners(settings.database_url, "nmap")
    admin, guest = bearer(tokens[Role.SECURITY_ADMIN]), bearer(tokens[Role.GUEST])
    names = settings.topics
    async with (
        Collector(settings, names.schedule_changes) as changes,
        running_api(settings) as client,
    ):
        bad_cron = job("bad", recurrence={"kind": "cron", "expression": "61 * * * *"})
        response = await client.post(J, json=bad_cron, headers=admin)
        assert response.status_code == 422
        assert "61 * * * *" in response.json()["detail"]
        assert "out of range" in response.json()["detail"]

        injection = job(
            "inject", targets={"filter": {"field": "1; DROP TABLE", "op": "eq", "value": "x"}}
        )
        response = await client.post(J, json=injection, headers=admin)
        assert response.status_code == 422
        assert "unknown filter field" in response.json()["detail"]

        response = await client.post(J, json=job("nightly"), headers=guest)
        assert response.status_code == 403
        response = await client.post(J, json=job("nightly"), headers=admin)
        assert response.status_code == 202
        event_id = response.json()["event_id"]

        assert (await client.get(f"{J}/nope", headers=guest)).status_code == 404
        await changes.wait_for(
            lambda: bool(changes.records), timeout=10, what="the published upsert"
        )
    (record,) = changes.records
    assert record.key == b"nightly"
    published = changes.values(names.schedule_changes)[0]
    assert published["type"] == "schedule.upserted"
    assert published["event_id"] == event_id
    assert published["schedule"]["id"] == "nightly"


async def test_created_job_runs_and_its_history_counts_skipped_runs(make_settings, workers) -> None:
    settings = make_settings(clock_speed=3600.0, clock_origin=datetime.now(UTC))
    workers(settings)
    tokens = await prepare(settings)
    admin, guest = bearer(tokens[Role.SECURITY_ADMIN]), bearer(tokens[Role.GUEST])
    producer = await start_producer(settings)
    await publish(producer, settings.topics.object_created, "lab-1", host_created("lab-1"))
    await producer.stop()
    target = {"filter": {"field": "labels.env", "op": "eq", "value": "absent"}}
    async with running_api(settings) as client:
        await put_scanners(client, admin, "nmap")
        response = await client.post(J, json=job("hourly", targets=target), headers=admin)
        assert response.status_code == 202
        history: dict[str, Any] = {}

        async def refresh() -> None:
            answer = await client.get(f"{J}/hourly/history", headers=guest)
            if answer.status_code == 200:
                history.update(answer.json())

        started = time.monotonic()
        while not history or history["stats"]["skipped"] < 2:
            assert time.monotonic() - started < 40, f"no skipped runs projected: {history}"
            await asyncio.sleep(0.2)
            await refresh()
        detail = (await client.get(f"{J}/hourly", headers=guest)).json()
        listed = (await client.get(J, headers=guest)).json()
    assert history["stats"]["failed"] == 0
    # At 3600× an hour passes each second: an occurrence that comes while the previous run
    # still waits for the partitions' answers on a slow broker is dropped as overlapping
    # (the default policy), coalesced or missed. None of that is a failure.
    late = [run for run in history["data"] if run["outcome"] != "skipped"]
    assert all(run["outcome"] == "dropped" for run in late), late
    assert {run["skip_reason"] for run in late} <= {"coalesced", "missed", "overlap"}, late
    assert detail["status"] == "active" and len(detail["next_fire_times"]) == 5
    assert detail["definition"]["targets"]["filter"]["value"] == "absent"
    assert [item["name"] for item in listed["data"]] == ["hourly"]


async def test_cli_creates_a_schedule_through_the_api_and_refuses_a_bad_rrule(
    settings: Settings, tmp_path: Path
) -> None:
    tokens = await prepare(settings)
    await register_scanners(settings.database_url, "nmap")  # no worker runs here
    names = settings.topics
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(job("weekly", recurrence={"kind": "rrule", "rule": "FREQ=SOMETIMES"}))
    )
    good = tmp_path / "good.json"
    good.write_text(json.dumps(job("weekly")))
    with kairos_api(settings, tmp_path) as url:
        env = {
            **settings_env(settings),
            "KAIROS_API_URL": url,
            "KAIROS_TOKEN": tokens[Role.SECURITY_ADMIN],
        }

        def kairos(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*kairos_executable(), *args], env=env, capture_output=True, text=True, timeout=60
            )

        refused = kairos("schedules", "create", "--file", str(bad))
        assert refused.returncode == 6 and "422" in refused.stderr and "FREQ" in refused.stderr
        async with Collector(settings, names.schedule_changes) as changes:
            created = kairos("schedules", "create", "--file", str(good))
            assert created.returncode == 0, created.stderr
            await changes.wait_for(lambda: len(changes.records) >= 1, timeout=10, what="an event")
            # No projector runs here: the API knows no schedule `weekly` yet, and says so.
            unknown = kairos("schedules", "pause", "weekly", "--note", "freeze")
            assert unknown.returncode == 4 and "404" in unknown.stderr
    kinds = [value["type"] for value in changes.values(names.schedule_changes)]
    assert kinds == ["schedule.upserted"]
    assert {record.key for record in changes.records} == {b"weekly"}


@contextmanager
def kairos_api(settings: Settings, folder: Path) -> Iterator[str]:
    """`kairos api` as a process on a free port; yields its URL."""
    port = free_port()
    log = (folder / "api.log").open("ab")
    process = subprocess.Popen(
        [*kairos_executable(), "api", "--port", str(port)],
        env=settings_env(settings),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_http_ok(f"{url}/healthz", timeout=60), (folder / "api.log").read_text()
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(20)
        log.close()


ROOT = Path(__file__).resolve().parents[2]


def _documented_bodies() -> list[dict[str, Any]]:
    """The JSON blocks of docs/api.md's scheduled-jobs section, in order."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("\n## Scheduled jobs", 1)[1].split("\n## ", 1)[0]
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.S)]


async def test_documented_schedule_bodies_are_what_the_api_accepts_and_refuses(
    settings: Settings,
) -> None:
    tokens = await prepare(settings)
    await register_scanners(settings.database_url, "nmap")  # no worker runs here
    admin = bearer(tokens[Role.SECURITY_ADMIN])
    blocks = _documented_bodies()
    bodies = [block for block in blocks if "recurrence" in block]
    # The docs and the OpenAPI examples (what /docs offers) are the same five schedules.
    assert bodies == [example["value"] for example in SCHEDULE_EXAMPLES.values()]
    assert {body["recurrence"]["kind"] for body in bodies} == {"cron", "interval", "rrule", "none"}
    assert any("filter" in body.get("targets", {}) for body in bodies)
    assert any("trigger" in body for body in bodies)
    (refusal,) = [block for block in blocks if "detail" in block]
    readme = (ROOT / "README.md").read_text()
    readme_filter = json.loads(re.search(r"a filter such as\s+`(\{.*?\})`", readme, re.S)[1])
    async with running_api(settings) as client:
        for body in bodies:
            response = await client.post(J, json=body, headers=admin)
            assert response.status_code == 202, (body["name"], response.text)
        response = await client.post(
            J, json=job("readme-filter", targets={"filter": readme_filter}), headers=admin
        )
        assert response.status_code == 202, response.text
        bad = job("bad", recurrence={"kind": "cron", "expression": "61 * * * *"})
        response = await client.post(J, json=bad, headers=admin)
        assert response.status_code == 422 and response.json() == refusal
        for example in UPDATE_EXAMPLES.values():  # PATCH of an unknown name: 404 after the body
            response = await client.patch(f"{J}/nope", json=example["value"], headers=admin)
            assert response.status_code == 404, response.text


async def test_openapi_types_the_schedule_bodies_with_the_schedule_model(
    settings: Settings,
) -> None:
    async with running_api(settings) as client:
        schema = (await client.get("/openapi.json")).json()
    operations = schema["paths"][J]["post"], schema["paths"][f"{J}/{{name}}"]["patch"]
    names = ("ScheduledJobCreate", "ScheduledJobUpdate")
    for operation, model in zip(operations, names, strict=True):
        body = operation["requestBody"]["content"]["application/json"]
        assert body["schema"] == {"$ref": f"#/components/schemas/{model}"}
        assert body["examples"]
    create = schema["components"]["schemas"]["ScheduledJobCreate"]
    assert create["required"] == ["name", "scanner", "recurrence"]
    assert set(create["properties"]) == set(Schedule.model_fields) - {"id"}
    assert "required" not in schema["components"]["schemas"]["ScheduledJobUpdate"]
