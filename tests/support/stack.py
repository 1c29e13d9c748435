"""Brokers, PostgreSQL and worker processes for integration tests: real servers only."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from kairos.cli import PROJECTOR_STARTED_LINE
from kairos.floor.settings import Settings

WORKER_READY_LINE = "Worker ready"


def chosen_broker() -> str:
    """KAIROS_TEST_BROKER=apache|tansu|external; default apache where Java and Maven exist."""
    from kairos.localstack.apache import java_and_maven_available

    chosen = os.environ.get("KAIROS_TEST_BROKER")
    if chosen:
        if chosen not in ("apache", "tansu", "external"):
            raise ValueError(f"KAIROS_TEST_BROKER must be apache, tansu or external, not {chosen}")
        return chosen
    return "apache" if java_and_maven_available() else "tansu"


def unique_name(stem: str) -> str:
    return f"{stem}{uuid.uuid4().hex[:10]}"


@dataclass
class KairosProcess:
    """A `kairos` subprocess, as operators run it, in its own process group."""

    process: subprocess.Popen[bytes]
    log_path: Path
    role: ClassVar[str] = "kairos"
    ready_line: ClassVar[str]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"{self.role} exited early:\n{self.log()[-4000:]}")
            if self.ready_line in self.log():
                return
            time.sleep(0.2)
        raise AssertionError(f"{self.role} not ready in {timeout}s:\n{self.log()[-4000:]}")

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self, stop_signal: signal.Signals = signal.SIGTERM) -> None:
        """SIGTERM as `docker stop` sends it (SIGINT: Ctrl-C); SIGKILL after 20 s."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, stop_signal)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


class WorkerProcess(KairosProcess):
    """`kairos worker`: ready once Faust has joined the group and recovered its tables."""

    role = "worker"
    ready_line = WORKER_READY_LINE


class ProjectorProcess(KairosProcess):
    """`kairos projector`: ready once it has passed its dependency checks and is consuming."""

    role = "projector"
    ready_line = PROJECTOR_STARTED_LINE


def settings_env(settings: Settings) -> dict[str, str]:
    return settings.child_env(os.environ)


def kairos_executable() -> list[str]:
    found = shutil.which("kairos", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "kairos.cli"]


def start_worker(settings: Settings, workdir: Path) -> WorkerProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "worker.log"
    log_file = log_path.open("ab")
    process = subprocess.Popen(
        [*kairos_executable(), "worker", "--workdir", str(workdir)],
        env=settings_env(settings),
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return WorkerProcess(process, log_path)


def start_projector(settings: Settings, log_directory: Path) -> ProjectorProcess:
    log_directory.mkdir(parents=True, exist_ok=True)
    log_path = log_directory / "projector.log"
    log_file = log_path.open("ab")
    process = subprocess.Popen(
        [*kairos_executable(), "projector"],
        env=settings_env(settings),
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return ProjectorProcess(process, log_path)
