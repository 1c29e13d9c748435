"""What a benchmark run starts and must stop: Apache Kafka, PostgreSQL and child processes.

One `BenchStack` serves a whole `python -m bench ...` invocation: the broker and the
database start on first use and every scenario isolates itself with its own topic prefix,
consumer group and database. Every child runs in its own process group and is killed on
teardown, including on Ctrl-C, so nothing is left behind.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kairos.floor.settings import Settings

log = logging.getLogger(__name__)

WORKER_READY_LINE = "Worker ready"
BENCH_PARTITIONS = 12


def unique_prefix(stem: str) -> str:
    return f"bench-{stem}-{uuid.uuid4().hex[:8]}-"


def rss_bytes(pid: int) -> int | None:
    """Resident set size of `pid`, read from /proc/<pid>/status (VmRSS)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User+system CPU time of `pid` so far, from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks
    except (OSError, ValueError, IndexError):
        return None


def _parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _children_of(parent: int) -> list[int]:
    """Processes whose parent is `parent` (PostgreSQL's backends and helpers)."""
    return [int(name) for name in os.listdir("/proc")
            if name.isdigit() and _parent_pid(int(name)) == parent]  # fmt: skip


@dataclass
class ChildProcess:
    """A process the bench started, in its own process group.

    A `kairos worker`, a `kairos projector` or a baseline.
    """

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    started_at: float = field(default_factory=time.time)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_text()[-chars:]

    def rss(self) -> int | None:
        return rss_bytes(self.pid)

    def kill(self) -> None:
        """SIGKILL the whole process group: no clean shutdown."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) did not die after SIGKILL", self.name, self.pid)

    def stop(self, grace: float = 15.0) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


class WorkerFailed(RuntimeError):
    """A child process exited or never became ready; the message carries its log tail."""


class BenchStack:
    """Broker, database and children of one bench invocation; `close()` stops them all."""

    def __init__(self, root: Path | None = None, *, keep: bool = False) -> None:
        self.root = root or Path(tempfile.mkdtemp(prefix="kairos-bench-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self._kafka: object | None = None
        self._postgres: object | None = None
        self._bootstrap: str | None = None
        self.children: list[ChildProcess] = []
        self.kafka_pid: int | None = None

    # --- servers -----------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        if self._bootstrap is None:
            from kairos.localstack.apache import ApacheKafkaCluster

            cluster = ApacheKafkaCluster(self.root / "kafka", nodes=1, heap="1g")
            self._kafka = cluster
            cluster.start(timeout=120)
            self._bootstrap = cluster.bootstrap_servers
            process = cluster._processes.get(0)  # noqa: SLF001 - only to sample broker RSS
            self.kafka_pid = process.pid if process else None
        return self._bootstrap

    def _postgres_server(self) -> object:
        if self._postgres is None:
            from kairos.localstack.postgres import LocalPostgres

            server = LocalPostgres(self.root / "postgres" / "data", fast=True)
            server.start(timeout=60)
            self._postgres = server
        return self._postgres

    def shared_cpu_seconds(self) -> dict[str, float | None]:
        """CPU seconds so far of what every system of a run shares on this machine: the Kafka
        broker, PostgreSQL (its server process and every backend, summed) and this bench
        process (the scanner fleet and the watchers). A system's own processes are its `pids`."""
        seconds: dict[str, float | None] = {"bench": cpu_seconds(os.getpid())}
        if self.kafka_pid is not None:
            seconds["broker"] = cpu_seconds(self.kafka_pid)
        postmaster = self._postmaster_pid()
        if postmaster is not None:
            pids = [postmaster, *_children_of(postmaster)]
            seconds["postgres"] = sum(cpu_seconds(pid) or 0.0 for pid in pids)
        return seconds

    def _postmaster_pid(self) -> int | None:
        if self._postgres is None:
            return None
        data_dir: Path = self._postgres.data_dir  # type: ignore[attr-defined]
        try:
            return int((data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def database(self, name: str) -> str:
        """A fresh database on the bench PostgreSQL; its DSN."""
        server = self._postgres_server()
        return server.create_database(name)  # type: ignore[attr-defined, no-any-return]

    def settings(self, stem: str, **overrides: object) -> Settings:
        """Settings for one scenario: its own topics, consumer group and database."""
        prefix = unique_prefix(stem)
        values: dict[str, object] = {
            "kafka_bootstrap_servers": self.bootstrap_servers,
            "database_url": self.database(prefix.rstrip("-").replace("-", "_")),
            "topic_prefix": prefix,
            "app_id": "kairos",
            "partitions": BENCH_PARTITIONS,
            "kafka_idempotence": True,
            "connect_timeout_seconds": 30.0,
        }
        values.update(overrides)
        return Settings.model_validate(values)

    # --- children ----------------------------------------------------------------------
    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> ChildProcess:
        directory = self.root / "logs"
        directory.mkdir(exist_ok=True)
        log_path = directory / f"{name}-{len(self.children)}.log"
        with log_path.open("ab") as output:
            process = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        child = ChildProcess(name, process, log_path)
        self.children.append(child)
        return child

    def start_worker(self, settings: Settings, name: str = "worker") -> ChildProcess:
        workdir = self.root / "workers" / f"{name}-{uuid.uuid4().hex[:6]}"
        workdir.mkdir(parents=True, exist_ok=True)
        return self.spawn(
            name, [*kairos_executable(), "worker", "--workdir", str(workdir)], worker_env(settings)
        )

    def start_projector(self, settings: Settings, name: str = "projector") -> ChildProcess:
        """`kairos projector`: the read model's writer, in a process of its own."""
        return self.spawn(name, [*kairos_executable(), "projector"], worker_env(settings))

    def start_python_module(
        self, name: str, module: str, args: list[str], env: dict[str, str] | None = None
    ) -> ChildProcess:
        environment = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        return self.spawn(name, [sys.executable, "-m", module, *args], environment)

    def close(self) -> None:
        children, self.children = self.children, []
        for child in children:
            child.stop(grace=5.0)
        for server in (self._postgres, self._kafka):
            if server is not None:
                try:
                    server.stop()  # type: ignore[attr-defined]
                except Exception:  # noqa: BLE001 - teardown must go on
                    log.exception("stopping %r failed", server)
        self._postgres = self._kafka = None
        self._bootstrap = None
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> BenchStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_ready(child: ChildProcess, timeout: float = 120.0, line: str = WORKER_READY_LINE) -> float:
    """Block until `line` shows in the child's log; the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if not child.alive():
            raise WorkerFailed(f"{child.name} exited early:\n{child.log_tail()}")
        if line in child.log_text():
            return time.monotonic() - started
        time.sleep(0.2)
    raise WorkerFailed(f"{child.name} not ready within {timeout:.0f} s:\n{child.log_tail()}")


def kairos_executable() -> list[str]:
    found = shutil.which("kairos", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "kairos.cli"]


def worker_env(settings: Settings) -> dict[str, str]:
    return settings.child_env(os.environ)
