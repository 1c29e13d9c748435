"""`kairos dev`: broker, PostgreSQL, worker and API on this machine, in one command.

The event store (the broker) and the read model (PostgreSQL) must never disagree: with
tansu, which keeps nothing after it stops, the read model starts clean on every run.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from kairos.devenv import stable_port
from kairos.floor.settings import Settings

DEV_DATABASE = "kairos"


@dataclass
class Watched:
    """A server `kairos dev` started and must notice dying: its name, a liveness check, its log."""

    name: str
    alive: Callable[[], bool]
    log: Path | None


@dataclass
class DevStack:
    """What `kairos dev` started, to be stopped in reverse order."""

    home: Path
    broker_name: str = ""
    broker_note: str = ""
    servers: list[Any] = field(default_factory=list)
    watched: list[Watched] = field(default_factory=list)
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)

    def first_dead(self) -> tuple[str, Path | None] | None:
        """(name, log) of the first child that exited, servers first; None if all run."""
        for server in self.watched:
            if not server.alive():
                return server.name, server.log
        for name, process in self.processes:
            if process.poll() is not None:
                return name, self.home / f"{name}.log"
        return None

    def children(self) -> dict[str, int]:
        """Process ids of the children still known, by name (for the lock file)."""
        pids = {name: process.pid for name, process in self.processes}
        for server in self.servers:
            for index, process in enumerate(_server_processes(server)):
                pids[f"{type(server).__name__}-{index}"] = process.pid
        return pids

    def stop(self) -> None:
        for _, process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _, process in reversed(self.processes):
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(5)
        for server in reversed(self.servers):
            server.stop()


def _server_processes(server: Any) -> list[subprocess.Popen[bytes]]:
    found = getattr(server, "_processes", None)
    if isinstance(found, dict):
        return list(found.values())
    process = getattr(server, "_process", None)
    return [process] if process is not None else []


def start_broker(stack: DevStack, choice: str, *, reset: bool) -> str:
    """Bootstrap servers of the broker chosen by `choice` (auto | apache | tansu)."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        stack.broker_name = f"external Kafka at {external}"
        stack.broker_note = "topics and state live in your cluster"
        return external
    from kairos.localstack.apache import ApacheKafkaCluster, java_and_maven_available

    kafka_dir = stack.home / "kafka"
    if reset:
        shutil.rmtree(kafka_dir, ignore_errors=True)
    if choice == "apache" or (choice == "auto" and java_and_maven_available()):
        cluster = ApacheKafkaCluster(kafka_dir, nodes=1)
        stack.servers.append(cluster)
        cluster.start(timeout=120)
        stack.watched.append(
            Watched("the broker (Apache Kafka)", lambda: cluster.is_running(0), cluster.log_path(0))
        )
        stack.ports["kafka"] = int(cluster.bootstrap_servers.rsplit(":", 1)[1])
        stack.broker_name = f"Apache Kafka (KRaft) at {cluster.bootstrap_servers}"
        stack.broker_note = f"durable: events and tables survive restarts in {kafka_dir}"
        return cluster.bootstrap_servers
    from kairos.localstack.tansu import TansuBroker

    tansu = TansuBroker(port=stable_port(stack.home, "tansu"), log_path=stack.home / "tansu.log")
    stack.servers.append(tansu)
    tansu.start()
    stack.watched.append(Watched("the broker (tansu)", tansu.is_running, tansu.log_path))
    stack.ports["tansu"] = tansu.port
    stack.broker_name = f"tansu (memory-only) at {tansu.bootstrap_servers}"
    stack.broker_note = "memory-only: all events vanish on exit, so the read model starts clean"
    return tansu.bootstrap_servers


def start_database(stack: DevStack, *, clean: bool) -> str:
    """DSN of the dev read model; `clean` drops it first."""
    external = os.environ.get("DATABASE_URL")
    if external:
        return external
    from kairos.localstack.postgres import LocalPostgres

    server = LocalPostgres(stack.home / "postgres", port=stable_port(stack.home, "postgres"))
    stack.servers.append(server)
    server.start()
    stack.watched.append(Watched("PostgreSQL", server.is_running, server.log_path))
    stack.ports["postgres"] = server.port
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        if clean:
            conn.execute(f"DROP DATABASE IF EXISTS {DEV_DATABASE} WITH (FORCE)")
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (DEV_DATABASE,)
        ).fetchone()
        if not exists:
            conn.execute(f"CREATE DATABASE {DEV_DATABASE}")
    return server.dsn_for(DEV_DATABASE)


WORKER_READY_LINE = b"Worker ready"
"""What Faust logs once the worker has joined its group and recovered its tables."""


def spawn(stack: DevStack, name: str, args: list[str], env: dict[str, str]) -> int:
    """Start `kairos ARGS` logging to HOME/NAME.log; return where this run's log starts."""
    log_path = stack.home / f"{name}.log"
    start = log_path.stat().st_size if log_path.exists() else 0
    process = subprocess.Popen(
        [sys.executable, "-m", "kairos.cli", *args],
        env=env,
        stdout=log_path.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    stack.processes.append((name, process))
    return start


def wait_for_log_line(
    stack: DevStack, name: str, line: bytes, *, start: int, timeout: float
) -> bool:
    """True once HOME/NAME.log shows `line` after byte `start`; False on timeout or if a
    child died meanwhile (the caller's watch loop then reports which)."""
    log_path = stack.home / f"{name}.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and stack.first_dead() is None:
        with log_path.open("rb") as log:
            log.seek(start)
            if line in log.read():
                return True
        time.sleep(0.3)
    return False


def wait_http_ok(url: str, timeout: float) -> bool:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            time.sleep(0.3)
    return False


def dev_admin_token(settings: Settings, previous: str | None = None) -> str:
    """The development SUPER_ADMIN token: `previous` while it is still valid, else a new one,
    so shells that exported it keep working across restarts."""
    from api.tokens import caller_of, create_token
    from kairos.floor.db import connect, migrate
    from schemas.api import Role

    async def create() -> str:
        await migrate(settings.database_url)
        async with await connect(settings.database_url) as conn:
            if previous:
                found = await caller_of(conn, previous)
                if found is not None and found[1] is Role.SUPER_ADMIN:
                    return previous
            return await create_token(
                conn,
                role=Role.SUPER_ADMIN,
                name="kairos dev",
                secret=settings.token_secret.get_secret_value(),
            )

    return asyncio.run(create())


def child_env(settings: Settings) -> dict[str, str]:
    return settings.child_env(os.environ)
