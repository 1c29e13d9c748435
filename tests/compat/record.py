"""Record a history with the release checked out at WORKTREE (see tests/compat/README.md).

Run it from WORKTREE with that release's code first on the path, so the worker, the projector
and the helpers that drive the scenario (its tests/support) are the release's own
(tests/compat/README.md has the whole command):

    cd WORKTREE && PYTHONPATH=WORKTREE python REPO/tests/compat/record.py WORKTREE OUTPUT

It starts a fresh Apache Kafka and PostgreSQL, the release's `kairos worker` and `kairos
projector` (from WORKTREE), drives the scenario below with a ScannerFleet that answers some
commands and leaves others in flight, stops everything with SIGTERM, and writes the history
(history.py) and the release's read model (read_model.json) to the output directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from history import READ_MODEL, dump  # tests/compat, the script's own directory

WORKTREE = Path(sys.argv[1]).resolve()
OUTPUT = Path(sys.argv[2]).resolve()
PREFIX = "compat-"
APP_ID = "kairos"
PARTITIONS = 4

SCORES: dict[str, float | None] = {
    "critical-1": 10,
    "critical-2": 5,
    "low-1": 30,
    "partial-1": 60,
    "mostly-1": 90,
    "compliant-1": 100,
    "compliant-2": 100,
    "failing-1": None,  # the scan fails once; its retry waits the retry delay
    "maintenance-1": 100,  # scanned, then in maintenance for a day
    "maintenance-2": 60,  # scanned, then in maintenance until told otherwise
    "prod-1": 100,
    "prod-2": 90,
}
IN_FLIGHT = ("in-flight-1", "in-flight-2", "in-flight-3")
"""Hosts whose commands are never answered: in flight when the recording ends."""
HELD = {"inactive-1": {"is_active": False}, "down-1": {"status": "down"}}
"""Hosts never scanned: inactive or down from the start."""
LABELS = {"prod-1": "prod", "prod-2": "prod", "compliant-1": "prod", "low-1": "dev"}
ORGANIZATIONS = {"prod-1": "acme", "prod-2": "acme", "critical-1": "globex"}

CRON_IN_FLIGHT = "nightly-prod"
"""A cron schedule over the prod hosts, triggered once: its commands are never answered."""
INTERVAL_DONE = "six-hourly"
"""An interval schedule over two hosts, triggered once: its commands are answered."""


def check_imports(env: dict[str, str]) -> None:
    """The release's code, not today's, is what runs: every package resolves in WORKTREE."""
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import kairos, schemas, streams, api, tests.support;"
            "print('\\n'.join(m.__file__ for m in (kairos, schemas, streams, api, tests.support)))",
        ],
        env=env,
        cwd=WORKTREE,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    outside = [path for path in found if not Path(path).resolve().is_relative_to(WORKTREE)]
    if outside or len(found) != 5:
        raise SystemExit(f"not the release's code: {outside or found}")
    import schemas
    import tests.support

    for module in (schemas, tests.support):
        assert Path(module.__file__ or "").resolve().is_relative_to(WORKTREE), module


def start(role: str, env: dict[str, str], workdir: Path) -> subprocess.Popen[bytes]:
    workdir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "kairos.cli", role]
    if role == "worker":
        command += ["--workdir", str(workdir)]
    log = (workdir / f"{role}.log").open("ab")
    return subprocess.Popen(
        command, env=env, cwd=WORKTREE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def wait_ready(
    process: subprocess.Popen[bytes], log: Path, line: str, timeout: float = 120
) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{log} exited early:\n{log.read_text()[-3000:]}")
        if log.exists() and line in log.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise SystemExit(f"{log} not ready:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    import signal

    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    return value


def read_model(database_url: str) -> dict[str, Any]:
    """The projector's rows: hosts, schedules, dead letters (by table, sorted by key)."""
    tables = {
        "host_schedule": "host_id",
        "schedules": "schedule_id",
        "schedule_runs": None,
        "dead_letters": None,
    }
    model: dict[str, Any] = {}
    with psycopg.connect(database_url) as conn:
        for table, key in tables.items():
            cursor = conn.execute(f"SELECT * FROM {table}")  # noqa: S608 - fixed names
            columns = [column.name for column in cursor.description or ()]
            rows = [{c: _plain(v) for c, v in zip(columns, row, strict=True)} for row in cursor]
            model[table] = sorted(rows, key=lambda row: str(row[key] if key else row))
    return model


async def scenario(settings: Any, database_url: str) -> None:
    from tests.support.agents import ScannerFleet
    from tests.support.factories import (
        host_created,
        maintenance_set,
        schedule_triggered,
        schedule_upserted,
    )
    from tests.support.kafka import configure, publish, start_producer, wait_until

    names = settings.topics

    def score_for(command: dict[str, Any]) -> float | None:
        return SCORES.get(command["host_id"], 100)

    def answer(command: dict[str, Any]) -> bool:
        if command.get("schedule_id") == CRON_IN_FLIGHT or command["host_id"] in IN_FLIGHT:
            return False
        return not (command["host_id"] == "failing-1" and command["attempt"] > 1)

    def rows() -> dict[str, dict[str, Any]]:
        with psycopg.connect(database_url) as conn:
            cursor = conn.execute(
                "SELECT host_id, state, in_flight_command_id, version FROM host_schedule"
            )
            return {row[0]: {"state": row[1], "in_flight": row[2]} for row in cursor}

    def schedules() -> dict[str, int]:
        """Runs recorded per schedule (fired or skipped)."""
        with psycopg.connect(database_url) as conn:
            cursor = conn.execute(
                "SELECT s.schedule_id, count(r.occurrence) FROM schedules s"
                " LEFT JOIN schedule_runs r USING (schedule_id) GROUP BY s.schedule_id"
            )
            return {row[0]: row[1] for row in cursor}

    producer = await start_producer(settings)
    try:
        # Room for every command at once: none waits for a slot when the recording ends.
        await configure(settings, producer, max_concurrent_scans=50)
        async with ScannerFleet(settings, score_for=score_for, answer=answer) as fleet:
            hosts = [*SCORES, *IN_FLIGHT, *HELD]
            for host in hosts:
                attributes: dict[str, Any] = dict(HELD.get(host, {}))
                if host in LABELS:
                    attributes["labels"] = {"env": LABELS[host]}
                if host in ORGANIZATIONS:
                    attributes["organization"] = ORGANIZATIONS[host]
                await publish(
                    producer, names.object_created, host, host_created(host, **attributes)
                )
            await wait_until(
                lambda: all(fleet.commands_for(host) for host in [*SCORES, *IN_FLIGHT]),
                timeout=120,
                what="a command for every scannable host",
            )
            await wait_until(
                lambda: (
                    {h for h, r in rows().items() if r["state"] != "unknown"}
                    >= set(SCORES) - {"failing-1"}
                ),
                timeout=120,
                what="every answered host's compliance state projected",
            )
            await publish(
                producer,
                names.schedule_changes,
                "maintenance-1",
                maintenance_set("maintenance-1", enabled=True, hours=24),
            )
            await publish(
                producer,
                names.schedule_changes,
                "maintenance-2",
                maintenance_set("maintenance-2", enabled=True),
            )
            prod = {"filter": {"field": "labels.env", "op": "eq", "value": "prod"}}
            cron = schedule_upserted(
                CRON_IN_FLIGHT,
                recurrence={"kind": "cron", "expression": "0 3 * * *"},
                targets=prod,
            )
            interval = schedule_upserted(
                INTERVAL_DONE,
                scanner="inventory",
                recurrence={"kind": "interval", "hours": 6},
                targets={"object_ids": ["compliant-2", "critical-2"]},
            )
            for change in (cron, interval):
                await publish(producer, names.schedule_changes, change.schedule_id, change)
            await wait_until(
                lambda: {CRON_IN_FLIGHT, INTERVAL_DONE} <= set(schedules()),
                timeout=60,
                what="both schedules projected",
            )
            for schedule_id in (CRON_IN_FLIGHT, INTERVAL_DONE):
                trigger = schedule_triggered(schedule_id)
                await publish(producer, names.schedule_changes, schedule_id, trigger)
            # A record no contract reads: the recorded dead letter.
            await publish(producer, names.object_created, "garbage-1", b"{not json")
            await wait_until(
                lambda: (
                    all(runs >= 1 for runs in schedules().values())
                    and len([c for c in fleet.commands if c.get("schedule_id")]) >= 5
                ),
                timeout=60,
                what="both schedules' runs and their commands",
            )

            def settled() -> bool:
                found = rows()
                return (
                    found.get("maintenance-1", {}).get("state") == "maintenance"
                    and found.get("maintenance-2", {}).get("state") == "maintenance"
                    and all(found.get(h, {}).get("in_flight") for h in IN_FLIGHT)
                    and len(found) == len(hosts)
                )

            await wait_until(settled, timeout=60, what="maintenance and in-flight projected")
            await asyncio.sleep(3)  # let the last answers be applied and projected
    finally:
        await producer.stop()


async def main() -> None:
    from kairos.floor.settings import Settings
    from kairos.localstack.apache import ApacheKafkaCluster
    from kairos.localstack.postgres import LocalPostgres
    from tests.support.stack import settings_env

    scratch = Path(tempfile.mkdtemp(prefix="kairos-compat-"))
    cluster = ApacheKafkaCluster(scratch / "kafka", nodes=1)
    postgres = LocalPostgres(scratch / "postgres", fast=True)
    cluster.start()
    postgres.start()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        database_url = postgres.create_database("kairos_compat")
        settings = Settings.model_validate(
            {
                "kafka_bootstrap_servers": cluster.bootstrap_servers,
                "database_url": database_url,
                "topic_prefix": PREFIX,
                "app_id": APP_ID,
                "partitions": PARTITIONS,
                "kafka_idempotence": True,
                "tick_seconds": 0.05,
                "projector_enabled": False,
            }
        )
        env = {**settings_env(settings), "PYTHONPATH": str(WORKTREE)}
        check_imports(env)
        projector = start("projector", env, scratch / "projector")
        processes.append(projector)
        wait_ready(projector, scratch / "projector" / "projector.log", "projector started")
        worker = start("worker", env, scratch / "worker")
        processes.append(worker)
        wait_ready(worker, scratch / "worker" / "worker.log", "Worker ready")
        await scenario(settings, database_url)
        stop(worker)
        recorded_until = datetime.now(UTC)
        await asyncio.sleep(3)  # the projector reads the worker's last changes
        stop(projector)
        OUTPUT.mkdir(parents=True, exist_ok=True)
        model = read_model(database_url)
        (OUTPUT / READ_MODEL).write_text(
            json.dumps(model, indent=1, sort_keys=True, default=str) + "\n"
        )
        release = subprocess.run(
            ["git", "-C", str(WORKTREE), "describe", "--tags", "--exact-match"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        meta = {
            "release": release,
            "topic_prefix": PREFIX,
            "app_id": APP_ID,
            "partitions": PARTITIONS,
            "recorded_until": recorded_until.isoformat(),
            "in_flight_hosts": list(IN_FLIGHT),
        }
        counts = await dump(cluster.bootstrap_servers, OUTPUT, meta)
        print(json.dumps(counts, indent=1, sort_keys=True))  # noqa: T201 - a script's output
    finally:
        for process in reversed(processes):
            stop(process)
        postgres.stop()
        cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
