"""The newcomer's path: `kairos dev` in one shell, plain `kairos` commands in a second one.

`kairos dev` runs as a user starts it (its own Apache Kafka or tansu, PostgreSQL, worker and
API); the second shell has a clean environment (no KAFKA_*, DATABASE_URL or KAIROS_*) and the
same working directory, so everything it knows comes from `.kairos/dev.env`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from kairos.floor.db import bind_event_store, migrate
from kairos.localstack.ports import free_port
from tests.support.stack import chosen_broker, kairos_executable, unique_name

pytestmark = pytest.mark.integration

READY_LINE = "Ctrl-C stops everything."
DOCS = Path(__file__).resolve().parents[2] / "docs" / "messages.md"


def clean_env() -> dict[str, str]:
    """A second shell's environment: nothing that names a Kairos stack."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("KAIROS_", "KAFKA_")) and key != "DATABASE_URL"
    }


@dataclass
class DevRun:
    folder: Path
    process: subprocess.Popen[bytes]
    output: Path

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def wait_ready(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if READY_LINE in self.text():
                return
            if self.process.poll() is not None:
                raise AssertionError(f"kairos dev exited early:\n{self.text()[-4000:]}")
            time.sleep(0.3)
        raise AssertionError(f"kairos dev not ready in {timeout}s:\n{self.text()[-4000:]}")

    def lock(self) -> dict[str, object]:
        details: dict[str, object] = json.loads((self.folder / ".kairos" / "dev.lock").read_text())
        return details

    def children(self) -> dict[str, int]:
        children = self.lock()["children"]
        assert isinstance(children, dict)
        return {str(name): int(pid) for name, pid in children.items()}

    def kairos(self, *args: str, timeout: float = 60, stdin: str | None = None) -> Run:
        started = time.monotonic()
        done = subprocess.run(
            [*kairos_executable(), *args],
            cwd=self.folder,
            env=clean_env(),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Run(done.returncode, done.stdout, done.stderr, time.monotonic() - started)

    def survivors(self, pids: list[int]) -> list[str]:
        """Processes still alive among `pids`, or with this folder in their command line."""
        alive = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().split()[2]
            except OSError:
                continue
            if state == "Z":
                continue
            if int(entry.name) in pids or str(self.folder) in cmdline:
                alive.append(f"{entry.name}: {cmdline[:160]}")
        return alive

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float


def start_dev(folder: Path, *options: str) -> DevRun:
    folder.mkdir(parents=True, exist_ok=True)
    output = folder / "dev-output.txt"
    broker = "tansu" if chosen_broker() == "tansu" else "apache"
    env = {**clean_env(), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [*kairos_executable(), "dev", "--broker", broker, "--port", str(free_port()), *options],
        cwd=folder,
        env=env,
        stdout=output.open("wb"),
        stderr=subprocess.STDOUT,
    )
    return DevRun(folder, process, output)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevRun]:
    run = start_dev(tmp_path_factory.mktemp("newcomer"))
    try:
        run.wait_ready()
        yield run
    finally:
        pids = list(run.children().values()) if run.process.poll() is None else []
        run.stop()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def eventually(run: Callable[[], Run], done: Callable[[Run], bool], timeout: float = 30) -> Run:
    """`run()` again until `done` holds of its answer: the read model follows the events."""
    deadline = time.monotonic() + timeout
    answer = run()
    while not done(answer):
        assert time.monotonic() < deadline, f"still {answer}"
        time.sleep(0.5)
        answer = run()
    return answer


def docs_example(topic: str) -> str:
    pattern = rf"<!-- example: {topic} -->\n```json\n(.*?)\n```"
    found = re.search(pattern, DOCS.read_text(), re.DOTALL)
    assert found is not None
    return found.group(1)


def test_dev_prints_the_exports_and_writes_them_for_other_shells(dev: DevRun) -> None:
    printed = dev.text()
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "DATABASE_URL", "KAIROS_API_URL", "KAIROS_TOKEN"):
        assert re.search(rf"^export {name}=\S+", printed, re.MULTILINE), name
        assert f"export {name}=" in (dev.folder / ".kairos" / "dev.env").read_text()


def test_second_shell_runs_the_operator_commands_with_no_exports(dev: DevRun) -> None:
    status = dev.kairos("status")
    assert status.code == 0, status.stderr
    assert re.search(r"^hosts_total\s+\d+", status.stdout, re.MULTILINE)
    as_json = json.loads(dev.kairos("status", "--json").stdout)
    assert as_json["enabled"] is True

    added = dev.kairos("hosts", "add", "cli-host-1", "--hostname", "one.example", "--label", "a=b")
    assert added.code == 0, added.stderr
    # 200 once projected (the CLI waits up to 5 s), else the API's 202 receipt.
    assert re.match(r"added cli-host-1: state unknown|accepted: event ", added.stdout)

    listed = eventually(
        lambda: dev.kairos("hosts", "list"),
        lambda run: re.search(r"^cli-host-1\s+unknown", run.stdout, re.MULTILINE) is not None,
    )
    assert listed.code == 0, listed.stderr
    assert re.search(r"^HOST\s+STATE", listed.stdout, re.MULTILINE)

    created = dev.kairos("token", "create", "--role", "SECURITY_ANALYST", "--name", "second")
    assert created.code == 0, created.stderr
    assert created.stdout.strip().splitlines()[-1].startswith("kairos_")

    tail = dev.kairos(
        "commands", "tail", "--from-beginning", "--scanner", "compliance",
        "--max", "1", "--timeout", "60",
    )  # fmt: skip
    assert tail.code == 0, tail.stderr
    assert re.search(r"^\S+\s+cli-host-1\s+compliance\s+unknown\s+10\s+1\s", tail.stdout, re.M)


def test_a_docs_example_is_published_and_its_command_followed(dev: DevRun) -> None:
    example = json.loads(docs_example("object-created"))
    host_id = unique_name("docs-host-")
    example.update({"object_id": host_id, "event_id": str(uuid.uuid4())})
    published = dev.kairos("events", "publish", "object-created", "-", stdin=json.dumps(example))
    assert published.code == 0, published.stderr
    assert f"published to object-created (key {host_id})" in published.stdout

    tail = dev.kairos(
        "commands", "tail", "--from-beginning", "--json", "--max", "50", "--timeout", "30"
    )
    commands = [json.loads(line) for line in tail.stdout.splitlines()]
    assert tail.code == 0, tail.stderr
    assert any(command["host_id"] == host_id for command in commands)

    naive = {**example, "occurred_at": "2026-11-24T08:00:00"}
    refused = dev.kairos("events", "publish", "object-created", "-", stdin=json.dumps(naive))
    assert refused.code == 6
    assert "occurred_at" in refused.stderr and "nothing was sent" in refused.stderr


def test_api_answers_become_exit_codes(dev: DevRun, tmp_path: Path) -> None:
    missing = dev.kairos("schedules", "trigger", "nope")
    assert (missing.code, missing.stdout) == (4, "")
    assert "404" in missing.stderr and "nope" in missing.stderr
    assert dev.kairos("hosts", "show", "nope").code == 4

    dev.kairos("hosts", "add", "twice")
    eventually(lambda: dev.kairos("hosts", "show", "twice"), lambda run: run.code == 0)
    again = dev.kairos("hosts", "add", "twice")
    assert again.code == 5 and "409" in again.stderr

    schedule = {
        "name": unique_name("nightly-"),
        "scanner": "vulnerability",
        "recurrence": {"kind": "cron", "expression": "0 2 * * *"},
    }
    job = tmp_path / "job.json"
    job.write_text(json.dumps(schedule))
    unregistered = dev.kairos("schedules", "create", "--file", str(job))
    assert unregistered.code == 6 and "scanner" in unregistered.stderr
    registered = dev.kairos("scanners", "set", "vulnerability", "--max-concurrent", "2")
    assert registered.code == 0 and "vulnerability: active, pool 2" in registered.stdout
    first = dev.kairos("schedules", "create", "--file", str(job))
    assert first.code == 0, first.stderr
    eventually(lambda: dev.kairos("schedules", "show", schedule["name"]), lambda r: r.code == 0)
    replaced = dev.kairos("schedules", "create", "--file", str(job))
    assert replaced.code == 5 and "409" in replaced.stderr
    history = dev.kairos("schedules", "history", schedule["name"])
    assert history.code == 0 and "success rate" in history.stdout

    bad = {
        **schedule,
        "name": unique_name("bad-"),
        "recurrence": {"kind": "cron", "expression": "61 * * * *"},
    }
    job.write_text(json.dumps(bad))
    invalid = dev.kairos("schedules", "create", "--file", str(job))
    assert invalid.code == 6 and "422" in invalid.stderr and "recurrence" in invalid.stderr

    out_of_range = dev.kairos("config", "set", "max_concurrent_scans=0")
    assert out_of_range.code == 6 and "max_concurrent_scans" in out_of_range.stderr

    guest = dev.kairos("token", "create", "--role", "GUEST", "--name", "guest")
    token = guest.stdout.strip().splitlines()[-1]
    forbidden = dev.kairos("hosts", "add", "by-guest", "--token", token)
    assert forbidden.code == 3 and "403" in forbidden.stderr
    assert dev.kairos("hosts", "list", "--token", token).code == 0


def test_hosts_import_maintenance_config_dead_letters_and_alerts_go_through_the_api(
    dev: DevRun, tmp_path: Path
) -> None:
    # No scanner answers here: without room under the cap, new hosts' commands would queue.
    changed = dev.kairos("config", "set", "max_concurrent_scans=1000", "retry_delay_seconds=120")
    assert changed.code == 0, changed.stderr
    eventually(
        lambda: dev.kairos("config", "show", "--json"),
        lambda run: json.loads(run.stdout)["max_concurrent_scans"] == 1000,
    )

    existing = unique_name("imp-")
    assert dev.kairos("hosts", "add", existing).code == 0
    eventually(lambda: dev.kairos("hosts", "show", existing), lambda run: run.code == 0)
    fleet = tmp_path / "fleet.csv"
    fleet.write_text(
        f"host_id,hostname,labels\nimp-a,a.example,env=prod;team=x\nimp-b,,\n{existing},,\n"
    )
    imported = dev.kairos("hosts", "import", str(fleet))
    assert imported.code == 5, imported.stderr
    assert "added 2 of 3 hosts" in imported.stdout and existing in imported.stderr

    eventually(
        lambda: dev.kairos("hosts", "list", "--label", "team=x", "--json"),
        lambda run: [host["host_id"] for host in json.loads(run.stdout)["data"]] == ["imp-a"],
    )

    maintained = dev.kairos("hosts", "maintenance", "imp-a", "--on", "--hours", "2")
    assert maintained.code == 0, maintained.stderr
    assert re.match(r"imp-a: maintenance on until |accepted: event ", maintained.stdout)
    shown = eventually(
        lambda: dev.kairos("hosts", "show", "imp-a", "--json"),
        lambda run: json.loads(run.stdout)["maintenance_mode"] is True,
    )
    assert json.loads(shown.stdout)["labels"] == {"env": "prod", "team": "x"}
    assert dev.kairos("hosts", "force-scan", "imp-a").code == 0
    history = eventually(
        lambda: dev.kairos("hosts", "show", "imp-a", "--history"),
        lambda run: re.search(r"^\S+\s+command\s+compliance\s", run.stdout, re.M) is not None,
    )
    assert history.code == 0, history.stderr

    letters = dev.kairos("dead-letters", "list")
    assert letters.code == 0 and letters.stdout.startswith("RECEIVED")

    alerts = dev.kairos("alerts", "list", "--state", "firing")
    assert alerts.code == 0 and alerts.stdout.startswith("RAISED"), alerts.stderr
    assert "firing" in alerts.stdout.splitlines()[-1]
    unknown = dev.kairos("alerts", "list", "--type", "nope")
    assert unknown.code == 6 and "422" in unknown.stderr and "type" in unknown.stderr


def test_a_second_dev_in_the_same_folder_says_where_the_first_runs(dev: DevRun) -> None:
    second = dev.kairos("dev", timeout=30)
    pid = dev.lock()["pid"]
    assert second.code == 2
    assert f"already running in {dev.folder} (pid {pid})" in second.stderr
    assert str(dev.lock()["api_url"]) in second.stderr
    assert dev.process.poll() is None, "the first one keeps running"


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_stops_every_child(tmp_path: Path, stop_signal: signal.Signals) -> None:
    run = start_dev(tmp_path / "stopped")
    try:
        run.wait_ready()
        children = run.children()
        assert {"worker", "api"} <= set(children) and len(children) >= 4
        run.process.send_signal(stop_signal)
        assert run.process.wait(90) == 0
        assert run.survivors([*children.values()]) == []
    finally:
        run.stop()


def test_demo_hosts_change_state_as_the_simulated_agent_answers(tmp_path: Path) -> None:
    run = start_dev(tmp_path / "demo", "--agents", "1")
    try:
        run.wait_ready()
        assert "agents.log" in run.text()
        demo = run.kairos("hosts", "demo", "5")
        assert demo.code == 0, demo.stderr
        assert "published 5 demo hosts" in demo.stdout

        def demo_hosts() -> dict[str, dict[str, Any]]:
            listed = run.kairos("hosts", "list", "--label", "demo=true", "--json")
            assert listed.code == 0, listed.stderr
            return {row["host_id"]: row for row in json.loads(listed.stdout)["data"]}

        def answered(host: dict[str, Any]) -> bool:
            # A simulated scan fails 5 % of the time and is retried minutes later: such a
            # host stays `unknown` with the failure counted.
            return bool(host["state"] != "unknown" or host["consecutive_scan_failures"] > 0)

        deadline = time.monotonic() + 90
        hosts = demo_hosts()
        while len(hosts) < 5 or not all(answered(host) for host in hosts.values()):
            assert time.monotonic() < deadline, f"demo hosts still {hosts}"
            time.sleep(1)
            hosts = demo_hosts()
        assert sorted(hosts) == [f"demo-{number:04d}" for number in range(1, 6)]
        assert any(host["state"] != "unknown" for host in hosts.values()), hosts

        children = run.children()
        assert "agents" in children
        run.process.send_signal(signal.SIGTERM)
        assert run.process.wait(90) == 0
        assert run.survivors([*children.values()]) == []
    finally:
        run.stop()


def test_a_database_that_dies_is_reported_and_dev_stops(tmp_path: Path) -> None:
    run = start_dev(tmp_path / "dying")
    try:
        run.wait_ready()
        children = run.children()
        [postgres] = [pid for name, pid in children.items() if name.startswith("LocalPostgres")]
        os.kill(postgres, signal.SIGKILL)
        assert run.process.wait(90) == 1
        [line] = [line for line in run.text().splitlines() if line.startswith("kairos:")]
        assert "PostgreSQL stopped unexpectedly" in line
        assert run.survivors([*children.values()]) == []
    finally:
        run.stop()


def test_a_restart_keeps_ports_and_token_and_a_new_event_store_clears_the_read_model(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "restarted"
    first = start_dev(folder)
    try:
        first.wait_ready()
        before = read_env(folder)
        assert first.kairos("hosts", "add", "old-host").code == 0
    finally:
        first.stop()
    assert first.process.returncode == 0
    # Another event store: a new, empty cluster (tansu keeps nothing anyway, and dev then
    # starts the read model clean, tokens included).
    durable = (folder / ".kairos" / "kafka").is_dir()
    shutil.rmtree(folder / ".kairos" / "kafka", ignore_errors=True)
    second = start_dev(folder)
    try:
        second.wait_ready()
        after = read_env(folder)
        assert after["DATABASE_URL"] == before["DATABASE_URL"], "PostgreSQL keeps its port"
        if durable:
            assert after["KAIROS_TOKEN"] == before["KAIROS_TOKEN"], "exported tokens keep working"
            assert "projected another Kafka cluster: cleared" in second.text()
        listed = json.loads(second.kairos("hosts", "list", "--json").stdout)
        assert listed["count"] == 0, "no host of the old event store is shown"
    finally:
        second.stop()


def read_env(folder: Path) -> dict[str, str]:
    from kairos.devenv import read_env_file

    return read_env_file(folder / ".kairos" / "dev.env")


async def test_the_read_model_is_cleared_when_its_event_store_changes(
    postgres_server: Callable[[str], str],
) -> None:
    dsn = postgres_server(unique_name("kairos_"))
    await migrate(dsn)
    assert await bind_event_store(dsn, cluster_id="A", bootstrap_servers="x:1") is False
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO dead_letters (event_id, source_topic, error, raw, received_at)"
            " VALUES (%s, 't', 'e', 'r', now())",
            (uuid.uuid4(),),
        )
        conn.execute("INSERT INTO api_tokens (token_hash, name, role) VALUES ('h', 'n', 'GUEST')")
    assert await bind_event_store(dsn, cluster_id="A", bootstrap_servers="x:1") is False
    assert await bind_event_store(dsn, cluster_id="B", bootstrap_servers="y:1") is True
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM dead_letters").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM api_tokens").fetchone() == (1,)
        assert conn.execute("SELECT cluster_id FROM event_store").fetchone() == ("B",)
