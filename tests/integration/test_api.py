"""The HTTP API against a real broker and a real PostgreSQL read model.

The read model is seeded with SQL, as the projector would write it, so every figure the API
answers can be checked against a known fleet. Writes go to the real `schedule-changes` topic
and are read back from it. The helpers here are shared by the other `test_api_*` modules.
"""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
import pytest_asyncio
from psycopg.types.json import Jsonb

from api.main import create_app
from api.tokens import create_token, revoke_token
from kairos.floor.clock import Clock, FrozenClock
from kairos.floor.db import connect, migrate
from kairos.floor.settings import Settings
from schemas.api import Role
from schemas.base import ComplianceState
from schemas.config import ScannerSpec, SchedulerConfig
from schemas.topics import CONFIG_KEY
from streams.admin import ensure_topics
from tests.support.kafka import Collector
from tests.support.stack import unique_name

pytestmark = pytest.mark.integration

P = "/api/compliance/scheduler"
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)

# --- shared helpers -----------------------------------------------------------------------


def api_settings(
    bootstrap_servers: str,
    postgres_server: Callable[[str], str],
    broker_kind: str,
    **overrides: Any,
) -> Settings:
    """Settings of one API under test: its own topics and its own fresh database."""
    values: dict[str, Any] = {
        "kafka_bootstrap_servers": bootstrap_servers,
        "database_url": postgres_server(unique_name("kairos_api_")),
        "topic_prefix": f"{unique_name('api')}-",
        "partitions": 4,
        "kafka_idempotence": broker_kind != "tansu",
        "connect_timeout_seconds": 15.0,
        "tick_seconds": 0.05,
    }
    values.update(overrides)
    return Settings.model_validate(values)


async def prepare(settings: Settings) -> dict[Role, str]:
    """Topics and schema as `kairos worker` / `kairos db migrate` make them; a token per role."""
    await ensure_topics(settings)
    await migrate(settings.database_url)
    async with await connect(settings.database_url) as conn:
        return {
            role: await create_token(
                conn, role=role, name=f"tester-{role.name.lower()}", secret=secret_of(settings)
            )
            for role in Role
        }


def secret_of(settings: Settings) -> str:
    return settings.token_secret.get_secret_value()


@asynccontextmanager
async def running_api(
    settings: Settings, *, clock: Clock | None = None, wait_seconds: float = 5.0
) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan running, reached in-process over ASGI."""
    app = create_app(settings, clock=clock, wait_seconds=wait_seconds)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos") as client:
            yield client


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def closed_port() -> int:
    """A local port nothing listens on: connections are refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


HOST_DEFAULTS: dict[str, Any] = {
    "state": "unknown",
    "compliance_state": "unknown",
    "score": None,
    "current_interval_minutes": 0,
    "last_scan_completed": None,
    "last_scan_id": None,
    "last_error": None,
    "maintenance_mode": False,
    "maintenance_until": None,
    "scan_priority": 10,
    "consecutive_scan_failures": 0,
    "in_flight_command_id": None,
    "is_active": True,
    "status": "up",
    "hostname": None,
    "organization": None,
    "attributes": {},
    "labels": {},
    "version": 1,
    "deleted": False,
}


async def insert_host(
    conn: psycopg.AsyncConnection, host_id: str, next_scan: datetime, **fields: Any
) -> dict[str, Any]:
    row = {
        **HOST_DEFAULTS,
        "host_id": host_id,
        "next_scheduled_scan": next_scan,
        "created_at": T0 - timedelta(days=3),
        "updated_at": T0 - timedelta(hours=1),
        **fields,
    }
    values = {k: Jsonb(v) if k in ("attributes", "labels") else v for k, v in row.items()}
    await conn.execute(
        f"INSERT INTO host_schedule ({', '.join(values)})"
        f" VALUES ({', '.join(['%s'] * len(values))})",
        list(values.values()),
    )
    return row


async def insert_command(
    conn: psycopg.AsyncConnection, command_id: str, host_id: str, issued_at: datetime, **fields: Any
) -> None:
    row = {
        "command_id": command_id,
        "host_id": host_id,
        "scanner": "compliance",
        "priority": 9,
        "reason": "scheduled",
        "state": "critical",
        "due_at": issued_at,
        "issued_at": issued_at,
        "deadline": issued_at + timedelta(minutes=10),
        "attempt": 1,
        "schedule_id": None,
        "outcome": None,
        "outcome_at": None,
        **fields,
    }
    await conn.execute(
        f"INSERT INTO scan_commands ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))})",
        list(row.values()),
    )


async def insert_scan(
    conn: psycopg.AsyncConnection,
    command_id: str,
    host_id: str,
    completed_at: datetime,
    **fields: Any,
) -> uuid.UUID:
    row = {
        "event_id": uuid.uuid4(),
        "command_id": command_id,
        "host_id": host_id,
        "scanner": "compliance",
        "status": "succeeded",
        "started_at": completed_at - timedelta(minutes=1),
        "completed_at": completed_at,
        "score": 42.0,
        "passed": 7,
        "failed": 3,
        "severity_critical_failed": 1,
        "severity_high_failed": 1,
        "severity_medium_failed": 1,
        "severity_low_failed": 0,
        "scan_id": f"scan-{command_id}",
        "error": None,
        **fields,
    }
    await conn.execute(
        f"INSERT INTO scan_results ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))})",
        list(row.values()),
    )
    return row["event_id"]


async def recount(conn: psycopg.AsyncConnection) -> None:
    """Counters as the projector keeps them, recomputed from the rows."""
    await conn.execute("DELETE FROM host_state_counts")
    await conn.execute("DELETE FROM host_flag_counts")
    await conn.execute(
        "INSERT INTO host_state_counts SELECT state, count(*) FROM host_schedule"
        " WHERE NOT deleted GROUP BY state"
    )
    await conn.execute(
        "INSERT INTO host_flag_counts SELECT flag, count(*) FILTER (WHERE on_) FROM host_schedule,"
        " LATERAL (VALUES ('in_flight', in_flight_command_id IS NOT NULL),"
        " ('maintenance', maintenance_mode), ('inactive', NOT is_active),"
        " ('down', status = 'down')) AS f(flag, on_) WHERE NOT deleted GROUP BY flag"
    )


# --- the seeded fleet ---------------------------------------------------------------------

STATES = ["compliant", "critical", "low", "partial", "mostly_compliant", "unknown"]
PRIORITY = {"compliant": 3, "critical": 9, "low": 7, "partial": 6, "mostly_compliant": 4,
            "unknown": 10, "maintenance": 1}  # fmt: skip


def fleet_row(number: int) -> dict[str, Any]:
    """Host h-NNN of the seeded fleet: a spread of states, flags, due times and labels."""
    state = STATES[number % len(STATES)]
    maintenance = number % 10 == 0
    shown = "maintenance" if maintenance else state
    return {
        "host_id": f"h-{number:03d}",
        "next_scan": T0 + timedelta(minutes=10 * (number - 15)),
        "state": shown,
        "compliance_state": state,
        "score": None if state == "unknown" else float(number * 3),
        "scan_priority": PRIORITY[shown],
        "maintenance_mode": maintenance,
        "maintenance_until": T0 + timedelta(hours=4) if maintenance else None,
        "in_flight_command_id": f"run-{number}" if number % 7 == 0 else None,
        "is_active": number != 29,
        "status": "down" if number == 27 else "up",
        "consecutive_scan_failures": 2 if number % 8 == 5 else 0,
        "hostname": f"h-{number:03d}.example.test",
        "organization": "org-a" if number % 2 else "org-b",
        "labels": {"env": "prod" if number % 3 == 0 else "dev", "team": "blue"},
        "version": number,
    }


FLEET = [fleet_row(number) for number in range(1, 31)]


def scannable(row: dict[str, Any]) -> bool:
    return not row["maintenance_mode"] and row["is_active"] and row["status"] == "up"


def due(row: dict[str, Any], now: datetime = T0) -> bool:
    return scannable(row) and row["next_scan"] <= now


def overdue(row: dict[str, Any]) -> bool:
    return due(row) and row["in_flight_command_id"] is None


CONFIG = SchedulerConfig(
    interval_critical=45,
    max_concurrent_scans=7,
    scanners=(ScannerSpec(name="nmap", max_concurrent=2),),
    version=3,
)


async def seed(conn: psycopg.AsyncConnection) -> None:
    definition = {"id": "nightly", "name": "nightly", "scanner": "nmap",
                  "recurrence": {"kind": "cron", "expression": "0 2 * * *"}}  # fmt: skip
    await conn.execute(
        "INSERT INTO schedules (schedule_id, name, definition, status, enabled, version,"
        " created_at, updated_at) VALUES ('nightly', 'nightly', %s, 'enabled', true, 1, %s, %s)",
        (Jsonb(definition), T0, T0),
    )
    for row in FLEET:
        fields = {k: v for k, v in row.items() if k not in ("host_id", "next_scan")}
        await insert_host(conn, row["host_id"], row["next_scan"], **fields)
    await insert_host(conn, "gone-1", T0 - timedelta(hours=1), deleted=True, state="critical")
    for number in range(1, 5):
        issued = T0 - timedelta(hours=5 - number)
        outcome = "completed" if number < 4 else None
        await insert_command(
            conn, f"cmd-h1-{number}", "h-001", issued, outcome=outcome,
            outcome_at=issued + timedelta(minutes=5) if outcome else None,
        )  # fmt: skip
        if number < 4:
            await insert_scan(
                conn, f"cmd-h1-{number}", "h-001", issued + timedelta(minutes=5),
                score=float(10 * number),
            )  # fmt: skip
    await insert_scan(conn, "cmd-h1-3", "h-001", T0 - timedelta(minutes=1), scanner="other")
    for number in range(5):
        await conn.execute(
            'INSERT INTO dead_letters (event_id, source_topic, partition, "offset", key, error,'
            " raw, received_at) VALUES (%s, 'object-created', 0, %s, %s, 'bad json', 'xx', %s)",
            (uuid.uuid4(), number, f"k-{number}", T0 - timedelta(minutes=number)),
        )
    for number in range(5):
        # a-0 and a-1 fire; a-2..a-4 were resolved. Newest first: a-0.
        raised = T0 - timedelta(hours=number)
        await conn.execute(
            "INSERT INTO alerts (alert_id, alert_type, subject_type, subject_id, severity,"
            " summary, details, raised_at, resolved_at, resolution)"
            " VALUES (%s, %s, 'host', %s, 'warning', %s, '{}', %s, %s, %s)",
            (
                uuid.uuid4(), "score_dropped" if number % 2 else "became_critical",
                f"h-00{number % 2 + 1}", f"a-{number}", raised,
                raised + timedelta(minutes=30) if number >= 2 else None,
                "score recovered to 90" if number >= 2 else None,
            ),
        )  # fmt: skip
    await conn.execute(
        "INSERT INTO scheduler_config (config, version, updated_at) VALUES (%s, %s, %s)",
        (Jsonb(CONFIG.model_dump(mode="json")), CONFIG.version, T0 - timedelta(hours=2)),
    )
    await conn.execute(
        "INSERT INTO projection_progress (source, newest_event_at, applied_at)"
        " VALUES ('projector', %s, %s)",
        (T0 - timedelta(seconds=3), T0 - timedelta(seconds=1)),
    )
    columns = await conn.execute(
        "SELECT column_name FROM information_schema.columns"
        " WHERE table_name = 'projection_progress'"
    )
    if "lag_seconds" in {row[0] for row in await columns.fetchall()}:
        await conn.execute("UPDATE projection_progress SET lag_seconds = 2, consumer_lag = 7")
    await recount(conn)
    await conn.commit()


@dataclass
class Stack:
    settings: Settings
    client: httpx.AsyncClient
    tokens: dict[Role, str]
    clock: FrozenClock

    def auth(self, role: Role = Role.SUPER_ADMIN) -> dict[str, str]:
        return bearer(self.tokens[role])

    async def get(self, path: str, role: Role = Role.GUEST, **kwargs: Any) -> httpx.Response:
        return await self.client.get(path, headers=self.auth(role), **kwargs)


@pytest_asyncio.fixture(scope="module")
async def stack(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> AsyncIterator[Stack]:
    settings = api_settings(bootstrap_servers, postgres_server, broker_kind)
    tokens = await prepare(settings)
    async with await connect(settings.database_url) as conn:
        await seed(conn)
        await conn.execute(
            'INSERT INTO dead_letters (event_id, source_topic, partition, "offset", key, error,'
            " raw, received_at) VALUES (%s, %s, 0, 9, 'k-9', 'bad json', 'xx', %s)",
            (REDRIVABLE, settings.topics.object_created, T0 - timedelta(hours=1)),
        )
    clock = FrozenClock(T0)
    async with running_api(settings, clock=clock, wait_seconds=1.0) as client:
        yield Stack(settings, client, tokens, clock)


# --- every endpoint x every role ----------------------------------------------------------

GUEST, ANALYST, ADMIN = Role.GUEST, Role.SECURITY_ANALYST, Role.SECURITY_ADMIN
J = "/api/scheduled-jobs"
AGENT_RESULT = "/api/agents/commands/cmd-h1-1/result"
REDRIVABLE = "0f0f0f0f-0000-4000-8000-000000000009"
"""A dead letter of the API's own object-created topic, redriven (forced) by the matrix."""
"""Answered 404 to an AGENT token: the gateway never leased that command."""
ENDPOINTS: list[tuple[str, str, Any, Role | None]] = [
    ("GET", f"{P}/config", None, GUEST),
    ("PUT", f"{P}/config", {"interval_critical": 60}, ADMIN),
    ("POST", f"{P}/toggle?enabled=true", None, ADMIN),
    ("GET", f"{P}/status", None, GUEST),
    ("GET", f"{P}/forecast?hours=6", None, GUEST),
    ("POST", f"{P}/initialize", None, ADMIN),
    ("GET", f"{P}/scanners", None, GUEST),
    ("GET", f"{P}/scanners/nmap", None, GUEST),
    ("PUT", f"{P}/scanners/nmap", {"max_concurrent": 3}, ADMIN),
    ("PATCH", f"{P}/scanners/compliance", {"timeout_seconds": 900}, ADMIN),
    ("POST", f"{P}/hosts:import", [{"id": "imported-1"}], ADMIN),
    ("GET", f"{P}/hosts-due?limit=5", None, GUEST),
    ("GET", f"{P}/hosts", None, GUEST),
    ("POST", f"{P}/hosts", {"host_id": "h-new", "labels": {"env": "test"}}, ADMIN),
    ("GET", f"{P}/hosts/h-001", None, GUEST),
    ("GET", f"{P}/hosts/h-001/history", None, GUEST),
    ("PUT", f"{P}/hosts/h-002/maintenance", {"enabled": True, "duration_hours": 2}, ANALYST),
    ("POST", f"{P}/hosts/h-003/force-scan", None, ANALYST),
    ("POST", f"{P}/hosts/h-002/deactivate", None, ADMIN),
    ("POST", f"{P}/hosts/h-002/reactivate", None, ADMIN),
    ("DELETE", f"{P}/hosts/h-003", None, ADMIN),
    ("GET", f"{P}/commands/cmd-h1-1", None, GUEST),
    ("GET", f"{P}/commands", None, GUEST),
    ("GET", f"{P}/workers", None, GUEST),
    ("GET", f"{P}/dead-letters", None, ADMIN),
    ("POST", f"{P}/dead-letters/{REDRIVABLE}/redrive?force=true", None, ADMIN),
    ("GET", f"{P}/audit", None, ANALYST),
    ("GET", f"{P}/alerts", None, GUEST),
    ("GET", J, None, GUEST),
    (
        "POST",
        J,
        {
            "name": "weekly",
            "scanner": "nmap",
            "recurrence": {"kind": "cron", "expression": "0 3 * * 1"},
        },
        ADMIN,
    ),
    ("GET", f"{J}/nightly", None, GUEST),
    ("PATCH", f"{J}/nightly", {"priority": 4}, ADMIN),
    ("DELETE", f"{J}/nightly", None, ADMIN),
    ("POST", f"{J}/nightly/enable", None, ADMIN),
    ("POST", f"{J}/nightly/disable", None, ADMIN),
    ("POST", f"{J}/nightly/pause", {"note": "freeze"}, ADMIN),
    ("POST", f"{J}/nightly/resume", None, ADMIN),
    ("POST", f"{J}/nightly/trigger", None, ADMIN),
    (
        "POST",
        f"{J}/nightly/backfill",
        {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"},
        ADMIN,
    ),
    ("GET", f"{J}/nightly/history", None, GUEST),
    ("POST", "/api/agents/compliance/commands:lease?wait=0", None, Role.AGENT),
    ("POST", AGENT_RESULT, {"status": "failed", "lease_id": "x"}, Role.AGENT),
    ("GET", "/healthz", None, None),
    ("GET", "/readyz", None, None),
    ("GET", "/metrics", None, None),
    ("GET", "/api/whoami", None, GUEST),
]
CALLERS: list[Role | str | None] = [None, "bad-token", *Role]


def expected_status(caller: Role | str | None, needed: Role | None) -> str:
    if needed is None:
        return "2xx"
    if not isinstance(caller, Role):
        return "401"
    if needed is Role.AGENT:  # The agents' gateway: AGENT tokens only.
        return "2xx" if caller is Role.AGENT else "403"
    return "2xx" if caller >= needed else "403"


def _template(path: str) -> str:
    bare = path.split("?")[0]
    for concrete, template in (("h-001", "{host_id}"), ("h-002", "{host_id}"),
                               ("h-003", "{host_id}"), ("cmd-h1-1", "{command_id}"),
                               ("/nightly", "/{name}"), ("/scanners/nmap", "/scanners/{name}"),
                               ("/scanners/compliance", "/scanners/{name}"),
                               ("/agents/compliance/", "/agents/{scanner}/"),
                               (REDRIVABLE, "{event_id}")):  # fmt: skip
        bare = bare.replace(concrete, template)
    return bare


async def test_role_matrix_covers_every_operation_in_the_openapi(stack: Stack) -> None:
    schema = (await stack.client.get("/openapi.json")).json()
    documented = {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method in operations
    }
    assert {(method, _template(path)) for method, path, _, _ in ENDPOINTS} == documented


@pytest.mark.parametrize(("method", "path", "body", "needed"), ENDPOINTS)
async def test_role_matrix(
    stack: Stack, method: str, path: str, body: Any, needed: Role | None, broker_kind: str
) -> None:
    if broker_kind == "tansu" and path.startswith("/api/agents/"):
        pytest.skip("the gateway's consumer group joins tansu too slowly; proved on Apache Kafka")
    seen = {}
    for caller in CALLERS:
        token = stack.tokens[caller] if isinstance(caller, Role) else caller
        response = await stack.client.request(method, path, json=body, headers=bearer(token))
        status = response.status_code
        seen[str(caller)] = "2xx" if 200 <= status < 300 else str(status)
        if status in (401, 403):
            assert set(response.json()) >= {"detail"}
        if status == 401:
            assert response.headers["www-authenticate"] == "Bearer"
    expected = {str(caller): expected_status(caller, needed) for caller in CALLERS}
    if path == AGENT_RESULT:
        expected[str(Role.AGENT)] = "404"
    assert seen == expected


# --- reads --------------------------------------------------------------------------------


async def test_config_is_the_projected_row(stack: Stack) -> None:
    body = (await stack.get(f"{P}/config")).json()
    assert body["version"] == 3
    assert body["interval_critical"] == 45 and body["max_concurrent_scans"] == 7
    assert body["interval_compliant"] == 1440 and body["enabled"] is True
    assert datetime.fromisoformat(body["updated_at"]) == T0 - timedelta(hours=2)


async def test_config_before_any_change_is_the_documented_defaults(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> None:
    settings = api_settings(bootstrap_servers, postgres_server, broker_kind)
    await migrate(settings.database_url)
    async with await connect(settings.database_url) as conn:
        token = await create_token(conn, role=Role.GUEST, name="fresh", secret=secret_of(settings))
    async with running_api(settings) as client:
        response = await client.get(f"{P}/config", headers=bearer(token))
    assert response.status_code == 200
    assert response.json() == {**SchedulerConfig().model_dump(mode="json"), "updated_at": None}


async def test_status_counts_from_counters_and_due_index(stack: Stack) -> None:
    body = (await stack.get(f"{P}/status")).json()
    expected_states = {state.value: 0 for state in ComplianceState}
    for row in FLEET:
        expected_states[row["state"]] += 1
    assert body["by_state"] == expected_states
    assert body["hosts_total"] == len(FLEET)
    assert body["in_flight"] == sum(row["in_flight_command_id"] is not None for row in FLEET)
    assert body["maintenance"] == 3 and body["inactive"] == 1 and body["down"] == 1
    assert body["overdue"] == sum(overdue(row) for row in FLEET)
    assert body["due_next_hour"] == sum(
        scannable(row) and T0 < row["next_scan"] < T0 + timedelta(hours=1) for row in FLEET
    )
    assert body["enabled"] is True and body["config_version"] == 3
    assert body["max_concurrent_scans"] == 7
    assert body["projection_lag_seconds"] == pytest.approx(2.0)
    assert datetime.fromisoformat(body["as_of"]) == T0


async def test_status_lists_the_next_hosts_due_and_those_past_the_promise(stack: Stack) -> None:
    body = (await stack.get(f"{P}/status")).json()
    waiting = sorted(
        (row for row in FLEET if scannable(row) and row["in_flight_command_id"] is None),
        key=lambda row: (row["next_scan"], -row["scan_priority"], row["host_id"]),
    )
    assert [entry["host_id"] for entry in body["upcoming"]] == [
        row["host_id"] for row in waiting[:10]
    ]
    first = body["upcoming"][0]
    assert datetime.fromisoformat(first["due_at"]) == waiting[0]["next_scan"]
    assert first["priority"] == waiting[0]["scan_priority"]
    assert first["state"] == waiting[0]["state"] and first["hostname"] == waiting[0]["hostname"]
    # Every seeded host was created three days ago and never scanned: past the 48 h promise
    # unless it is inactive or in maintenance.
    assert body["past_promise"] == sum(
        row["is_active"] and not row["maintenance_mode"] for row in FLEET
    )
    three = (await stack.get(f"{P}/status", params={"upcoming": 3})).json()
    assert [entry["host_id"] for entry in three["upcoming"]] == [r["host_id"] for r in waiting[:3]]
    assert (await stack.get(f"{P}/status", params={"upcoming": 0})).json()["upcoming"] == []
    assert (await stack.get(f"{P}/status", params={"upcoming": 101})).status_code == 422


async def test_status_reports_how_late_the_newest_commands_went_out(stack: Stack) -> None:
    # The seeded commands went out an hour or more before now: outside what /status measures.
    assert (await stack.get(f"{P}/status")).json()["dispatch_lateness"] is None
    host = "late-host"
    late_by = [0.25 * number for number in range(1, 1201)]  # More than the 1,000 measured.
    async with await connect(stack.settings.database_url) as conn:
        for number, seconds in enumerate(late_by):
            issued = T0 - timedelta(seconds=number + 1)  # The smallest lateness is the newest.
            await insert_command(
                conn, f"late-{number}", host, issued, due_at=issued - timedelta(seconds=seconds)
            )
        await conn.commit()
    try:
        lateness = (await stack.get(f"{P}/status")).json()["dispatch_lateness"]
    finally:
        async with await connect(stack.settings.database_url) as conn:
            await conn.execute("DELETE FROM scan_commands WHERE host_id = %s", (host,))
            await conn.commit()
    measured = sorted(late_by[:1000])
    assert lateness == {
        "commands": 1000,
        "p50_seconds": pytest.approx(measured[499]),
        "p99_seconds": pytest.approx(measured[989]),
        "max_seconds": pytest.approx(measured[-1]),
    }


async def test_hosts_due_in_dispatch_order_with_limit(stack: Stack) -> None:
    wanted = sorted(
        (row for row in FLEET if due(row)),
        key=lambda row: (-row["scan_priority"], row["next_scan"], row["host_id"]),
    )
    body = (await stack.get(f"{P}/hosts-due", params={"limit": 5})).json()
    assert [host["host_id"] for host in body["data"]] == [row["host_id"] for row in wanted[:5]]
    assert body["count"] == len(wanted)
    everything = (await stack.get(f"{P}/hosts-due", params={"limit": 1000})).json()
    assert [host["host_id"] for host in everything["data"]] == [row["host_id"] for row in wanted]
    default = (await stack.get(f"{P}/hosts-due")).json()
    assert len(default["data"]) == 10


async def _all_pages(stack: Stack, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    for _ in range(100):
        response = await stack.get(
            path, Role.SUPER_ADMIN, params={**params, **({"cursor": cursor} if cursor else {})}
        )
        assert response.status_code == 200, response.text
        page = response.json()
        assert len(page["data"]) <= params.get("limit", 100)
        items += page["data"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError("pagination did not end")


async def test_hosts_cursor_pages_visit_every_host_once_in_order(stack: Stack) -> None:
    first = (await stack.get(f"{P}/hosts", params={"limit": 7})).json()
    assert first["count"] == len(FLEET) and len(first["data"]) == 7
    assert first["next_cursor"]
    hosts = await _all_pages(stack, f"{P}/hosts", {"limit": 7})
    assert [host["host_id"] for host in hosts] == sorted(row["host_id"] for row in FLEET)
    exact = await _all_pages(stack, f"{P}/hosts", {"limit": 10})
    assert len(exact) == len(FLEET)


@pytest.mark.parametrize(
    ("params", "keep"),
    [
        ({"state": "critical"}, lambda row: row["state"] == "critical"),
        ({"state": "maintenance"}, lambda row: row["state"] == "maintenance"),
        ({"maintenance": "true"}, lambda row: row["maintenance_mode"]),
        ({"maintenance": "false"}, lambda row: not row["maintenance_mode"]),
        ({"overdue": "true"}, overdue),
        ({"overdue": "false"}, lambda row: not overdue(row)),
        ({"label": "env=prod"}, lambda row: row["labels"]["env"] == "prod"),
        ({"label": ["env=prod", "team=blue"]}, lambda row: row["labels"]["env"] == "prod"),
        ({"label": "team=red"}, lambda row: False),
        ({"organization": "org-a"}, lambda row: row["organization"] == "org-a"),
        ({"failing": "true"}, lambda row: row["consecutive_scan_failures"] > 0),
        (
            {"failing": "false", "state": "partial"},
            lambda row: row["consecutive_scan_failures"] == 0 and row["state"] == "partial",
        ),
        (
            {"organization": "org-b", "state": "compliant", "label": "env=prod"},
            lambda row: (
                row["organization"] == "org-b"
                and row["state"] == "compliant"
                and row["labels"]["env"] == "prod"
            ),
        ),
    ],
)
async def test_hosts_filters(
    stack: Stack, params: dict[str, Any], keep: Callable[[dict[str, Any]], bool]
) -> None:
    wanted = sorted(row["host_id"] for row in FLEET if keep(row))
    found = await _all_pages(stack, f"{P}/hosts", {**params, "limit": 4})
    assert [host["host_id"] for host in found] == wanted
    first = (await stack.get(f"{P}/hosts", params={**params, "limit": 4})).json()
    assert first["count"] == len(wanted)


async def test_host_detail_has_schedule_and_latest_compliance_scan(stack: Stack) -> None:
    body = (await stack.get(f"{P}/hosts/h-001")).json()
    row = FLEET[0]
    for field in ("state", "compliance_state", "score", "scan_priority", "maintenance_mode",
                  "in_flight_command_id", "is_active", "status", "version", "organization",
                  "labels", "hostname"):  # fmt: skip
        assert body[field] == row[field], field
    assert datetime.fromisoformat(body["next_scheduled_scan"]) == row["next_scan"]
    for field in ("current_interval_minutes", "last_scan_completed", "last_scan_id",
                  "maintenance_until", "consecutive_scan_failures", "last_error"):  # fmt: skip
        assert field in body
    latest = body["latest_scan"]
    assert latest["command_id"] == "cmd-h1-3" and latest["scanner"] == "compliance"
    assert latest["score"] == 30.0 and latest["kind"] == "scan"
    without = (await stack.get(f"{P}/hosts/h-002")).json()
    assert without["latest_scan"] is None


async def test_host_history_is_newest_first_and_paginated(stack: Stack) -> None:
    entries = await _all_pages(stack, f"{P}/hosts/h-001/history", {"limit": 3})
    assert len(entries) == 8  # 4 commands, 3 compliance results, 1 result of another scanner
    instants = [
        datetime.fromisoformat(
            entry["completed_at"] if entry["kind"] == "scan" else entry["issued_at"]
        )
        for entry in entries
    ]
    assert instants == sorted(instants, reverse=True)
    assert [entry["kind"] for entry in entries[:3]] == ["scan", "command", "scan"]
    assert {entry["kind"] for entry in entries} == {"scan", "command"}
    page = (await stack.get(f"{P}/hosts/h-001/history", params={"limit": 3})).json()
    assert page["count"] == 8 and len(page["data"]) == 3
    empty = (await stack.get(f"{P}/hosts/h-002/history")).json()
    assert empty == {"data": [], "count": 0, "next_cursor": None}


async def test_command_detail_with_outcome_and_results(stack: Stack) -> None:
    body = (await stack.get(f"{P}/commands/cmd-h1-2")).json()
    assert body["host_id"] == "h-001" and body["outcome"] == "completed"
    assert [result["score"] for result in body["results"]] == [20.0]
    pending = (await stack.get(f"{P}/commands/cmd-h1-4")).json()
    assert pending["outcome"] is None and pending["results"] == []


async def test_dead_letters_newest_first_paginated(stack: Stack) -> None:
    letters = await _all_pages(stack, f"{P}/dead-letters", {"limit": 2})
    # k-9 is the role matrix's redrivable letter, the oldest.
    assert [letter["key"] for letter in letters] == [f"k-{number}" for number in (0, 1, 2, 3, 4, 9)]
    page = (await stack.get(f"{P}/dead-letters", Role.SECURITY_ADMIN, params={"limit": 2})).json()
    assert page["count"] == 6


async def test_alerts_newest_first_filtered_and_paginated(stack: Stack) -> None:
    alerts = await _all_pages(stack, f"{P}/alerts", {"limit": 2})
    assert [alert["summary"] for alert in alerts] == [f"a-{number}" for number in range(5)]
    assert [alert["state"] for alert in alerts] == ["firing"] * 2 + ["resolved"] * 3
    firing = (await stack.get(f"{P}/alerts", params={"state": "firing"})).json()
    assert [a["summary"] for a in firing["data"]] == ["a-0", "a-1"]
    assert (firing["count"], firing["firing"]) == (2, 2)
    resolved = (await stack.get(f"{P}/alerts", params={"state": "resolved"})).json()
    assert resolved["count"] == 3 and {a["resolution"] for a in resolved["data"]} == {
        "score recovered to 90"
    }
    by_host = await _all_pages(
        stack, f"{P}/alerts", {"subject": "h-002", "type": "score_dropped", "limit": 1}
    )
    assert [a["summary"] for a in by_host] == ["a-1", "a-3"]
    everything = (await stack.get(f"{P}/alerts")).json()
    assert (everything["count"], everything["firing"]) == (5, 2)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", f"{P}/hosts/nope"),
        ("GET", f"{P}/hosts/gone-1"),
        ("GET", f"{P}/hosts/nope/history"),
        ("PUT", f"{P}/hosts/nope/maintenance"),
        ("POST", f"{P}/hosts/nope/force-scan"),
        ("GET", f"{P}/commands/nope"),
    ],
)
async def test_unknown_host_or_command_is_404(stack: Stack, method: str, path: str) -> None:
    body = {"enabled": True} if path.endswith("maintenance") else None
    response = await stack.client.request(method, path, json=body, headers=stack.auth())
    assert response.status_code == 404
    assert "not in the read model" in response.json()["detail"]


# --- validation: one error shape naming the field ----------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("GET", f"{P}/hosts-due?limit=0", None, "limit"),
        ("GET", f"{P}/hosts-due?limit=1001", None, "limit"),
        ("GET", f"{P}/hosts?state=shiny", None, "state"),
        ("GET", f"{P}/hosts?label=no-equals-sign", None, "label.0"),
        ("GET", f"{P}/hosts?cursor=bm90LWEtY3Vyc29y", None, "cursor"),
        ("GET", f"{P}/hosts?cursor=!!", None, "cursor"),
        ("GET", f"{P}/hosts/h-001/history?cursor=WyJ4Il0", None, "cursor"),
        ("GET", f"{P}/dead-letters?limit=5000", None, "limit"),
        ("GET", f"{P}/alerts?state=loud", None, "state"),
        ("GET", f"{P}/alerts?type=nope", None, "type"),
        ("GET", f"{P}/alerts?cursor=!!", None, "cursor"),
        ("PUT", f"{P}/config", {"interval_critical": 5}, "interval_critical"),
        ("PUT", f"{P}/config", {"max_concurrent_scans": 0}, "max_concurrent_scans"),
        ("PUT", f"{P}/config", {"interval_typo": 60}, "interval_typo"),
        ("PUT", f"{P}/config", {}, "body"),
        ("POST", f"{P}/toggle", None, "enabled"),
        ("POST", f"{P}/toggle?enabled=maybe", None, "enabled"),
        (
            "PUT",
            f"{P}/hosts/h-001/maintenance",
            {"enabled": True, "duration_hours": 169},
            "duration_hours",
        ),
        ("PUT", f"{P}/hosts/h-001/maintenance", {"duration_hours": 2}, "enabled"),
    ],
)
async def test_invalid_input_is_422_naming_the_field(
    stack: Stack, method: str, path: str, body: dict[str, Any] | None, field: str
) -> None:
    response = await stack.client.request(method, path, json=body, headers=stack.auth())
    assert response.status_code == 422, response.text
    payload = response.json()
    assert set(payload) == {"detail", "errors"}
    assert field in [error["field"] for error in payload["errors"]]
    assert field in payload["detail"]


async def test_every_error_has_the_one_shape(stack: Stack) -> None:
    for response in (
        await stack.client.get(f"{P}/nowhere", headers=stack.auth()),
        await stack.client.delete(f"{P}/config", headers=stack.auth()),
        await stack.client.get(f"{P}/config"),
        await stack.client.get(f"{P}/dead-letters", headers=stack.auth(Role.GUEST)),
        await stack.client.get(f"{P}/hosts/nope", headers=stack.auth()),
    ):
        assert response.status_code >= 400
        assert isinstance(response.json()["detail"], str)
    not_allowed = await stack.client.delete(f"{P}/config", headers=stack.auth())
    assert not_allowed.status_code == 405 and not_allowed.headers["allow"] == "GET, PUT"
    typo = await stack.get(f"{P}/hosts", params={"orgnization": "org-a"})
    assert typo.status_code == 422 and typo.json()["errors"][0]["field"] == "orgnization"
    health_typo = await stack.client.get("/healthz", params={"verbose": "1"})
    assert health_typo.status_code == 422


# --- writes -------------------------------------------------------------------------------


async def test_writes_publish_changes_keyed_and_signed_by_the_token(stack: Stack) -> None:
    names = stack.settings.topics
    admin = stack.auth(Role.SECURITY_ADMIN)
    analyst = stack.auth(Role.SECURITY_ANALYST)
    answers = [
        await stack.client.put(f"{P}/config", json={"interval_low": 90}, headers=admin),
        await stack.client.post(f"{P}/toggle", params={"enabled": "false"}, headers=admin),
        await stack.client.post(f"{P}/initialize", headers=admin),
        await stack.client.put(
            f"{P}/hosts/h-005/maintenance",
            json={"enabled": True, "duration_hours": 3},
            headers=analyst,
        ),
        await stack.client.post(f"{P}/hosts/h-006/force-scan", headers=analyst),
    ]
    assert [answer.status_code for answer in answers] == [202] * 5
    ids = [answer.json()["event_id"] for answer in answers]
    assert all(answer.json()["status"] == "accepted" for answer in answers)
    assert [answer.headers["kairos-event-id"] for answer in answers] == ids
    async with Collector(stack.settings, names.schedule_changes) as collected:
        await collected.wait_for(
            lambda: {r["event_id"] for r in collected.values(names.schedule_changes)} >= set(ids),
            timeout=10,
            what="the five published changes",
        )
        records = {
            (value := json.loads(record.value))["event_id"]: (record.key, value)
            for record in collected.records
        }
    published = [records[event_id] for event_id in ids]
    assert [key.decode() for key, _ in published] == [CONFIG_KEY] * 3 + ["h-005", "h-006"]
    assert [value["type"] for _, value in published] == [
        "config.updated", "scheduler.toggled", "hosts.initialize_requested",
        "host.maintenance_set", "host.scan_requested",
    ]  # fmt: skip
    assert [value["actor"] for _, value in published] == ["tester-security_admin"] * 3 + [
        "tester-security_analyst"
    ] * 2
    assert published[0][1]["changes"] == {
        **{field: None for field in published[0][1]["changes"]},
        "interval_low": 90,
    }
    assert published[1][1]["enabled"] is False
    assert published[3][1]["duration_hours"] == 3 and published[3][1]["enabled"] is True
    assert all(datetime.fromisoformat(value["occurred_at"]) == T0 for _, value in published)


async def test_put_config_accepts_enabled_as_toggle_does(stack: Stack) -> None:
    names = stack.settings.topics
    response = await stack.client.put(
        f"{P}/config", json={"enabled": False, "interval_low": 90}, headers=stack.auth()
    )
    assert response.status_code == 202
    event_id = response.json()["event_id"]
    async with Collector(stack.settings, names.schedule_changes) as collected:
        changes = lambda: collected.values(names.schedule_changes)  # noqa: E731
        await collected.wait_for(
            lambda: any(v["event_id"] == event_id for v in changes()),
            timeout=10,
            what="the published change",
        )
        [change] = [v for v in changes() if v["event_id"] == event_id]
    assert change["type"] == "config.updated"
    assert change["changes"]["enabled"] is False and change["changes"]["interval_low"] == 90
    refused = await stack.client.put(f"{P}/config", json={"enabled": "no"}, headers=stack.auth())
    assert refused.status_code == 422 and refused.json()["errors"][0]["field"] == "enabled"


async def test_import_publishes_one_object_created_event_per_host_in_batches(
    stack: Stack,
) -> None:
    names = stack.settings.topics
    lines = [
        json.dumps({"id": f"imp-{n:04d}", "hostname": f"imp-{n}.example.test",
                    "labels": {"env": "prod"}, "active": n != 3})
        for n in range(1200)
    ]  # fmt: skip
    response = await stack.client.post(
        f"{P}/hosts:import",
        content="\n".join(lines).encode(),
        headers={**stack.auth(), "Content-Type": "application/x-ndjson"},
    )
    assert response.status_code == 202
    assert response.json() == {"status": "accepted", "hosts": 1200, "batches": 3}
    async with Collector(stack.settings, names.object_created) as collected:
        # The module's stack is shared: other tests publish hosts too (not named imp-*).
        mine = lambda: [r for r in collected.records if r.key.startswith(b"imp-")]  # noqa: E731
        await collected.wait_for(
            lambda: len(mine()) >= 1200, timeout=15, what="1200 object-created events"
        )
        records = mine()
    assert len(records) == 1200
    assert {record.key.decode() for record in records} == {f"imp-{n:04d}" for n in range(1200)}
    first = json.loads(next(r.value for r in records if r.key == b"imp-0003"))
    assert first["object_type"] == "host" and first["operation"] == "created"
    assert first["attributes"]["is_active"] is False
    assert first["attributes"]["labels"] == {"env": "prod"}
    assert datetime.fromisoformat(first["occurred_at"]) == T0


async def test_import_with_a_bad_row_publishes_nothing_and_names_the_line(stack: Stack) -> None:
    names = stack.settings.topics
    response = await stack.client.post(
        f"{P}/hosts:import",
        content=b"id,hostname,active\nbad-1,bad-1.example.test,true\nbad-2,,perhaps\n",
        headers={**stack.auth(), "Content-Type": "text/csv"},
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "line 3"
    async with Collector(stack.settings, names.object_created) as collected:
        await asyncio.sleep(1.0)  # Nothing may arrive; a second is ample for a local broker.
        assert [r for r in collected.records if r.key.startswith(b"bad-")] == []


async def test_initialize_says_how_many_hosts_it_re_plans(stack: Stack) -> None:
    response = await stack.client.post(f"{P}/initialize", headers=stack.auth())
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "accepted" and body["event_id"]
    # Every seeded host is unscanned; those with a command in flight are left as they are.
    assert body["hosts"] == sum(row["in_flight_command_id"] is None for row in FLEET)


async def test_wait_answers_202_when_the_projection_does_not_show_the_change(
    stack: Stack,
) -> None:
    """No worker runs here, so nothing projects: after the wait the receipt comes back."""
    response = await stack.client.put(
        f"{P}/hosts/h-008/maintenance", params={"wait": "true"}, json={"enabled": True},
        headers=stack.auth(),
    )  # fmt: skip
    assert response.status_code == 202
    assert response.json()["status"] == "accepted"


async def test_force_scan_of_an_inactive_or_down_host_is_published(stack: Stack) -> None:
    names = stack.settings.topics
    ids = []
    for host_id in ("h-029", "h-027"):
        response = await stack.client.post(f"{P}/hosts/{host_id}/force-scan", headers=stack.auth())
        assert response.status_code == 202
        ids.append(response.json()["event_id"])
    async with Collector(stack.settings, names.schedule_changes) as collected:
        await collected.wait_for(
            lambda: {v["event_id"] for v in collected.values(names.schedule_changes)} >= set(ids),
            timeout=10,
            what="both force scans published",
        )
        forced = [v for v in collected.values(names.schedule_changes) if v["event_id"] in ids]
    assert sorted(v["host_id"] for v in forced) == ["h-027", "h-029"]
    assert {v["type"] for v in forced} == {"host.scan_requested"}


async def test_revoked_token_is_refused_within_the_token_cache_time(stack: Stack) -> None:
    cache_seconds = 0.5
    settings = stack.settings.model_copy(update={"api_token_cache_seconds": cache_seconds})
    secret = secret_of(settings)
    async with await connect(settings.database_url) as conn:
        by_token = await create_token(
            conn, role=Role.SUPER_ADMIN, name="short-lived", secret=secret
        )
        by_name = await create_token(conn, role=Role.GUEST, name="contractor", secret=secret)
    async with running_api(settings, clock=stack.clock) as client:
        for token in (by_token, by_name):
            assert (await client.get(f"{P}/status", headers=bearer(token))).status_code == 200
        async with await connect(settings.database_url) as conn:
            assert await revoke_token(conn, token=by_token) == 1
            assert await revoke_token(conn, name="contractor") == 1
            assert await revoke_token(conn, name="contractor") == 0
            with pytest.raises(ValueError):
                await revoke_token(conn)
        await asyncio.sleep(cache_seconds + 0.1)
        for token in (by_token, by_name):
            response = await client.get(f"{P}/status", headers=bearer(token))
            assert response.status_code == 401
            assert response.json()["detail"] == "the bearer token is unknown or revoked"


# --- health and metrics -------------------------------------------------------------------


async def test_healthz_and_readyz(stack: Stack) -> None:
    assert (await stack.client.get("/healthz")).json() == {"status": "ok"}
    ready = await stack.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"detail": "ready", "status": "ready", "kafka": "ok", "database": "ok"}


async def test_metrics_has_route_counts_latency_pool_and_projection_lag(stack: Stack) -> None:
    await stack.get(f"{P}/hosts/h-001")
    await stack.get(f"{P}/hosts/h-002")
    await stack.client.get("/no/such/path")
    response = await stack.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    route = f'route="{P}/hosts/{{host_id}}"'
    count_line = next(
        line
        for line in text.splitlines()
        if line.startswith("kairos_api_requests_total{")
        and route in line
        and 'status="200"' in line
    )
    assert int(count_line.rsplit(" ", 1)[1]) >= 2
    assert f'kairos_api_request_duration_seconds_bucket{{method="GET",{route},le="+Inf"}}' in text
    assert 'route="unmatched"' in text and "/no/such/path" not in text
    assert "kairos_db_pool_size " in text and "kairos_db_pool_available " in text
    assert "kairos_projection_lag_seconds 2" in text
    assert "kairos_read_model_up 1" in text
    # The figures the forecast alert fires on are the forecast's own (GET …/forecast).
    forecast = (await stack.get(f"{P}/forecast")).json()
    assert f"kairos_forecast_promise_kept {int(forecast['promise_kept'])}" in text
    assert f"kairos_forecast_hosts_missing_promise {len(forecast['misses'])}" in text


async def test_openapi_declares_bearer_auth_and_error_answers(stack: Stack) -> None:
    schema = (await stack.client.get("/openapi.json")).json()
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if path.startswith((P, J, "/api/whoami", "/api/agents")):
                assert operation["security"] == [{"HTTPBearer": []}], (method, path)
                assert {"401", "403", "503"} <= set(operation["responses"]), (method, path)
            else:
                assert "security" not in operation
            for status, answer in operation["responses"].items():
                if status.startswith(("4", "5")) and path.startswith((P, J, "/api/agents")):
                    assert answer["content"]["application/json"]["schema"]["$ref"].endswith(
                        "/ErrorPublic"
                    ), (method, path, status)
    writes = [("put", f"{P}/config", "Accepted"), ("post", f"{P}/toggle", "Accepted"),
              ("post", f"{P}/initialize", "InitializeAccepted"),
              ("put", f"{P}/hosts/{{host_id}}/maintenance", "Accepted"),
              ("post", f"{P}/hosts/{{host_id}}/force-scan", "Accepted"),
              ("post", f"{P}/hosts:import", "HostsImported")]  # fmt: skip
    for method, path, model in writes:
        responses = schema["paths"][path][method]["responses"]
        assert responses["202"]["content"]["application/json"]["schema"]["$ref"].endswith(
            f"/{model}"
        ), path


# --- the console and the documentation pages ----------------------------------------------


async def test_console_and_docs_are_served_from_package_data_without_auth(stack: Stack) -> None:
    index = await stack.client.get("/")
    assert index.status_code == 200 and 'src="/console/app.js"' in index.text
    for page in ("/docs", "/redoc"):
        html = (await stack.client.get(page)).text
        assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html
    docs = (await stack.client.get("/docs")).text
    assert "/docs/assets/swagger-ui-bundle.js" in docs
    assert "/docs/assets/redoc.standalone.js" in (await stack.client.get("/redoc")).text
    for asset in ("/console/app.js", "/console/console.css", "/docs/assets/swagger-ui-bundle.js",
                  "/docs/assets/swagger-ui.css", "/docs/assets/redoc.standalone.js"):  # fmt: skip
        response = await stack.client.get(asset)
        assert response.status_code == 200, asset
        assert len(response.content) > 1000, asset


async def test_whoami_names_the_token_and_its_role(stack: Stack) -> None:
    response = await stack.get("/api/whoami", role=Role.SECURITY_ANALYST)
    assert response.json() == {"name": "tester-security_analyst", "role": "SECURITY_ANALYST"}


async def test_schedule_history_pages_by_offset_newest_first(stack: Stack) -> None:
    async with await connect(stack.settings.database_url) as conn:
        for hour in range(5):
            at = T0 - timedelta(hours=hour)
            await conn.execute(
                "INSERT INTO schedule_runs (schedule_id, occurrence, attempt, reason, fired_at,"
                " outcome) VALUES ('nightly', %s, 1, 'scheduled', %s, 'skipped')"
                " ON CONFLICT DO NOTHING",
                (at, at),
            )
        await conn.commit()
    pages = [
        (await stack.get(f"{J}/nightly/history", params={"limit": 2, "offset": offset})).json()
        for offset in (0, 2, 4)
    ]
    occurrences = [run["occurrence"] for page in pages for run in page["data"]]
    assert [datetime.fromisoformat(item) for item in occurrences] == [
        T0 - timedelta(hours=hour) for hour in range(5)
    ]
    assert {page["count"] for page in pages} == {5}
