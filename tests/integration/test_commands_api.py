"""GET /commands: every command across the fleet, filtered, paged, with its lifecycle.

Commands, results, timeouts and schedule runs go through the real topics and a real
`kairos projector` into PostgreSQL, as the worker would leave them; hosts are seeded with
SQL (only their organization matters here). The API answers from that read model.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from kairos.floor.db import connect
from kairos.floor.settings import Settings
from schemas.api import Role
from schemas.base import CommandReason, ComplianceState
from schemas.commands import ScanCommand
from schemas.internal import CommandTimedOut
from schemas.results import ScanCompleted, ScanStatus
from schemas.schedules import ScheduleRunRecorded
from streams.policy.targets import occurrence_command_id
from tests.integration.test_api import T0, P, bearer, insert_host, prepare, running_api
from tests.integration.test_schedules_api import kairos_api
from tests.support.kafka import start_producer, wait_until
from tests.support.stack import kairos_executable, settings_env

pytestmark = pytest.mark.integration

NIGHTLY = "nightly"
RUN_1 = datetime(2030, 1, 1, 2, 0, tzinfo=UTC)
RUN_2 = datetime(2030, 1, 2, 2, 0, tzinfo=UTC)


def command(
    command_id: str,
    host_id: str,
    issued_at: datetime,
    *,
    scanner: str = "compliance",
    reason: CommandReason = CommandReason.SCHEDULED,
    schedule_id: str | None = None,
    due_at: datetime | None = None,
) -> ScanCommand:
    return ScanCommand(
        event_id=uuid.uuid4(),
        command_id=command_id,
        host_id=host_id,
        scanner=scanner,
        priority=5,
        reason=reason,
        state=ComplianceState.LOW,
        due_at=due_at or issued_at,
        issued_at=issued_at,
        deadline=issued_at + timedelta(minutes=10),
        attempt=1,
        schedule_id=schedule_id,
    )


def result(sent: ScanCommand, at: datetime, *, succeeded: bool) -> ScanCompleted:
    return ScanCompleted(
        event_id=uuid.uuid4(),
        command_id=sent.command_id,
        host_id=sent.host_id,
        scanner=sent.scanner,
        status=ScanStatus.SUCCEEDED if succeeded else ScanStatus.FAILED,
        started_at=at - timedelta(minutes=1),
        completed_at=at,
        score=90.0 if succeeded else None,
        error=None if succeeded else "scanner crashed",
    )


def run_fired(occurrence: datetime, fired_at: datetime) -> ScheduleRunRecorded:
    return ScheduleRunRecorded(
        schedule_id=NIGHTLY,
        occurrence=occurrence,
        attempt=1,
        reason="schedule",
        outcome="fired",
        fired_at=fired_at,
        hosts_matched=2,
        commands_issued=2,
    )


def rows(settings: Settings, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(settings.database_url) as conn:
        return conn.execute(statement).fetchall()


# The fleet: a (acme) and b (beta). Issued times are distinct, one minute apart.
ISSUED = {name: T0 + timedelta(minutes=number) for number, name in enumerate("abcdefgh")}
NIGHTLY_A1 = occurrence_command_id(NIGHTLY, RUN_1, "host-a")
NIGHTLY_B1 = occurrence_command_id(NIGHTLY, RUN_1, "host-b")
NIGHTLY_A2 = occurrence_command_id(NIGHTLY, RUN_2, "host-a")


async def test_commands_are_listed_across_the_fleet_filtered_and_paged(
    settings: Settings, projectors, tmp_path: Path
) -> None:
    tokens = await prepare(settings)
    async with await connect(settings.database_url) as conn:
        await insert_host(conn, "host-a", T0, organization="acme")
        await insert_host(conn, "host-b", T0, organization="beta")
    projectors(settings)
    names = settings.topics
    sent = {
        "ok": command("cmd-ok", "host-a", ISSUED["a"]),
        "failed": command("cmd-failed", "host-b", ISSUED["b"], scanner="nmap"),
        "late": command("cmd-late", "host-a", ISSUED["c"], reason=CommandReason.FORCE),
        "flying": command("cmd-flying", "host-b", ISSUED["d"], reason=CommandReason.RETRY),
        # A run's commands are due at its occurrence; the projector finds the run from that.
        "a1": command(NIGHTLY_A1, "host-a", ISSUED["e"], scanner="nmap",
                      reason=CommandReason.SCHEDULE, schedule_id=NIGHTLY, due_at=RUN_1),
        "b1": command(NIGHTLY_B1, "host-b", ISSUED["f"], scanner="nmap",
                      reason=CommandReason.SCHEDULE, schedule_id=NIGHTLY, due_at=RUN_1),
        # Jitter moved the second run's fire time: only the run's record tells its occurrence.
        "a2": command(NIGHTLY_A2, "host-a", ISSUED["g"], scanner="nmap",
                      reason=CommandReason.SCHEDULE, schedule_id=NIGHTLY,
                      due_at=RUN_2 + timedelta(minutes=7)),
    }  # fmt: skip
    producer = await start_producer(settings)
    try:
        for message in sent.values():
            await producer.send(
                names.scan_commands,
                message.model_dump_json().encode(),
                key=message.host_id.encode(),
            )
        ended = [
            result(sent["ok"], ISSUED["a"] + timedelta(seconds=30), succeeded=True),
            result(sent["failed"], ISSUED["b"] + timedelta(seconds=40), succeeded=False),
            result(sent["a1"], ISSUED["e"] + timedelta(seconds=50), succeeded=True),
        ]
        for message in ended:
            await producer.send(
                names.scan_completed,
                message.model_dump_json().encode(),
                key=message.host_id.encode(),
            )
        timeout = CommandTimedOut(
            host_id="host-a", command_id="cmd-late", deadline=sent["late"].deadline
        )
        await producer.send(names.host_signals, timeout.model_dump_json().encode(), key=b"host-a")
        await producer.flush()
        await wait_until(
            lambda: (
                rows(settings, "SELECT count(*) FROM scan_commands WHERE outcome IS NOT NULL")
                == [(4,)]
                and rows(settings, "SELECT count(*) FROM scan_commands") == [(7,)]
            ),
            timeout=60,
            what="the projector to write every command and how four of them ended",
        )
        # The second run's record comes after its command was projected.
        assert rows(
            settings, f"SELECT occurrence FROM scan_commands WHERE command_id = '{NIGHTLY_A2}'"
        ) == [(None,)]
        record = run_fired(RUN_2, RUN_2 + timedelta(minutes=7))
        await producer.send_and_wait(
            names.schedule_runs, record.model_dump_json().encode(), key=NIGHTLY.encode()
        )
        await wait_until(
            lambda: (
                rows(
                    settings,
                    f"SELECT occurrence FROM scan_commands WHERE command_id = '{NIGHTLY_A2}'",
                )
                == [(RUN_2,)]
            ),
            timeout=60,
            what="the run's record to give its earlier command its occurrence",
        )
    finally:
        await producer.stop()

    guest = bearer(tokens[Role.GUEST])
    async with running_api(settings) as client:

        async def ids(**params: Any) -> list[str]:
            response = await client.get(f"{P}/commands", headers=guest, params=params)
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["count"] == len(body["data"])
            return [item["command_id"] for item in body["data"]]

        everything = await ids()
        assert everything == [
            NIGHTLY_A2, NIGHTLY_B1, NIGHTLY_A1, "cmd-flying", "cmd-late", "cmd-failed", "cmd-ok"
        ]  # fmt: skip
        assert await ids(host="host-b") == [NIGHTLY_B1, "cmd-flying", "cmd-failed"]
        assert await ids(scanner="nmap") == [NIGHTLY_A2, NIGHTLY_B1, NIGHTLY_A1, "cmd-failed"]
        assert await ids(schedule=NIGHTLY) == [NIGHTLY_A2, NIGHTLY_B1, NIGHTLY_A1]
        assert await ids(schedule=NIGHTLY, run=RUN_1.isoformat()) == [NIGHTLY_B1, NIGHTLY_A1]
        assert await ids(run=RUN_1.isoformat()) == [NIGHTLY_B1, NIGHTLY_A1]  # Every schedule's.
        assert await ids(schedule="weekly", run=RUN_1.isoformat()) == []
        # The same instant written with another offset is the same run.
        other_offset = RUN_2.astimezone(datetime.fromisoformat("2030-01-01T00:00:00+05:30").tzinfo)
        assert await ids(schedule=NIGHTLY, run=other_offset.isoformat()) == [NIGHTLY_A2]
        assert await ids(organization="acme") == [NIGHTLY_A2, NIGHTLY_A1, "cmd-late", "cmd-ok"]
        assert await ids(reason="force") == ["cmd-late"]
        assert await ids(reason="retry") == ["cmd-flying"]
        assert await ids(state="in_flight") == [NIGHTLY_A2, NIGHTLY_B1, "cmd-flying"]
        assert await ids(state="succeeded") == [NIGHTLY_A1, "cmd-ok"]
        assert await ids(state="failed") == ["cmd-failed"]
        assert await ids(state="timed_out") == ["cmd-late"]
        assert await ids(
            issued_from=ISSUED["b"].isoformat(), issued_until=ISSUED["d"].isoformat()
        ) == ["cmd-late", "cmd-failed"]
        assert await ids(organization="beta", state="in_flight", scanner="nmap") == [NIGHTLY_B1]
        assert await ids(host="nobody") == []
        # A range that ends before it starts matches nothing.
        assert (
            await ids(issued_from=ISSUED["c"].isoformat(), issued_until=ISSUED["b"].isoformat())
            == []
        )

        # The lifecycle of each command: issued, then a result or its deadline, and when.
        response = await client.get(f"{P}/commands", headers=guest, params={"limit": 1000})
        by_id = {item["command_id"]: item for item in response.json()["data"]}
        assert by_id["cmd-ok"]["command_state"] == "succeeded"
        assert by_id["cmd-ok"]["outcome"] == "completed"
        assert by_id["cmd-ok"]["outcome_at"] == "2030-01-01T12:00:30Z"
        assert by_id["cmd-ok"]["issued_at"] == "2030-01-01T12:00:00Z"
        assert by_id["cmd-ok"]["organization"] == "acme"
        assert by_id["cmd-failed"]["outcome"] == "failed"
        assert by_id["cmd-late"]["command_state"] == "timed_out"
        assert by_id["cmd-late"]["outcome_at"] == "2030-01-01T12:12:00Z"  # Its deadline.
        assert by_id["cmd-flying"]["command_state"] == "in_flight"
        assert by_id["cmd-flying"]["outcome"] is None and by_id["cmd-flying"]["outcome_at"] is None
        assert by_id[NIGHTLY_A1]["occurrence"] == "2030-01-01T02:00:00Z"
        assert by_id[NIGHTLY_A2]["occurrence"] == "2030-01-02T02:00:00Z"
        assert by_id["cmd-ok"]["occurrence"] is None

        # Cursor pages visit every command once, in order; count covers all pages.
        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 3, **({"cursor": cursor} if cursor else {})}
            response = await client.get(f"{P}/commands", headers=guest, params=params)
            body = response.json()
            assert body["count"] == 7 and len(body["data"]) <= 3
            seen += [item["command_id"] for item in body["data"]]
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert seen == everything

        await _bad_filters_are_422_naming_the_field(client, guest)
        response = await client.get(f"{P}/commands")
        assert response.status_code == 401
        response = await client.get(f"{P}/commands", headers=bearer(tokens[Role.AGENT]))
        assert response.status_code == 403

    # `kairos commands list`: the same filters, through the API.
    with kairos_api(settings, tmp_path) as url:
        env = {**settings_env(settings), "KAIROS_API_URL": url, "KAIROS_TOKEN": tokens[Role.GUEST]}

        def kairos(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*kairos_executable(), "commands", "list", *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )

        listed = kairos("--organization", "acme", "--state", "timed_out", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [c["command_id"] for c in json.loads(listed.stdout)["data"]] == ["cmd-late"]
        paged = kairos("--schedule", NIGHTLY, "--run", RUN_1.isoformat(), "--limit", "1", "--all")
        assert paged.returncode == 0, paged.stderr
        assert NIGHTLY_A1 in paged.stdout and NIGHTLY_B1 in paged.stdout
        assert "2 command(s)" in paged.stdout
        window = kairos("--from", ISSUED["b"].isoformat(), "--until", ISSUED["d"].isoformat())
        assert "cmd-late" in window.stdout and "cmd-ok" not in window.stdout
        refused = kairos("--state", "lost")
        assert refused.returncode == 6 and "422" in refused.stderr and "state" in refused.stderr


async def _bad_filters_are_422_naming_the_field(
    client: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"state": "lost"}, "state"),
        ({"reason": "whim"}, "reason"),
        ({"schedule": NIGHTLY, "run": "2030-01-01T02:00:00"}, "run"),  # No offset.
        ({"issued_from": "yesterday"}, "issued_from"),
        ({"issued_until": "1700000000"}, "issued_until"),  # Epoch seconds are not RFC 3339.
        ({"issued_from": "2030-01-01T12:00:00"}, "issued_from"),
        ({"limit": 0}, "limit"),
        ({"cursor": "bm90LWEtY3Vyc29y"}, "cursor"),
        ({"host": "x" * 256}, "host"),
        ({"host": "a\x00b"}, "host"),
        ({"colour": "red"}, "colour"),
    ]
    for params, field in cases:
        response = await client.get(f"{P}/commands", headers=headers, params=params)
        assert response.status_code == 422, (params, response.text)
        assert field in [error["field"] for error in response.json()["errors"]], (
            params,
            response.text,
        )
