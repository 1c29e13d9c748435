"""A rolling upgrade from v0.42.0 on Apache Kafka, in the order docs/upgrading.md gives.

The projector is upgraded first: today's projector runs from the start. A v0.42.0 worker (a
git worktree of the tag, made here) serves a fleet under load; today's worker joins its group,
both serve it together, then the old one gets SIGTERM, as a rolling update sends it. Nothing
is lost (every host keeps being scanned; every result is applied) and nothing is issued twice
(a command id comes back only as the dispatcher's documented re-send of the commands in
flight when its partition changes owner, always for the same due instance).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from aiokafka import AIOKafkaProducer

from kairos.floor.settings import Settings
from schemas.config import SchedulerConfig
from schemas.internal import ConfigPublished
from schemas.topics import CONFIG_KEY
from streams import codec
from streams.consumer import FETCH_MAX_WAIT_MS
from tests.support.agents import ScannerFleet, always
from tests.support.factories import config_updated, host_created
from tests.support.kafka import (
    Collector,
    hosts_changelog,
    publish,
    start_producer,
    wait_until,
)
from tests.support.stack import ProjectorProcess, WorkerProcess, settings_env

pytestmark = pytest.mark.integration

RELEASE = "v0.42.0"
REPOSITORY = Path(__file__).resolve().parents[2]
HOSTS = 120
CAP = 20
TWO_MINUTES_PER_SECOND = 120.0
"""Critical hosts every 15 scheduler minutes: 7.5 s of wall time per cycle; the longest scan
timeout (an hour) is 30 s of wall time, longer than a hand-over takes."""
CYCLES_AFTER_STOP = 2
SENT_AGAIN = re.compile(r"dispatch queue rebuilt: \d+ waiting, \d+ in flight \((\d+) sent again\)")
"""The dispatcher's log line after a rebuild, the same in both releases."""


@pytest.fixture
def old_release(tmp_path: Path) -> Iterator[Path]:
    """A worktree of the previous release, removed after the test."""
    git = shutil.which("git")
    if git is None:
        pytest.skip(f"git is not installed: the {RELEASE} worker runs from a git worktree")
    tagged = subprocess.run(
        [git, "-C", str(REPOSITORY), "rev-parse", "--verify", "--quiet", f"{RELEASE}^{{commit}}"],
        capture_output=True,
    )
    if tagged.returncode != 0:
        pytest.skip(f"the tag {RELEASE} is not in this clone (fetch tags: git fetch --tags)")
    worktree = tmp_path / RELEASE
    subprocess.run(
        [git, "-C", str(REPOSITORY), "worktree", "add", "--detach", str(worktree), RELEASE],
        check=True,
        capture_output=True,
    )
    try:
        yield worktree
    finally:
        subprocess.run(
            [git, "-C", str(REPOSITORY), "worktree", "remove", "--force", str(worktree)],
            capture_output=True,
        )


def start_old_worker(settings: Settings, worktree: Path, workdir: Path) -> WorkerProcess:
    """`kairos worker` of the release in `worktree`: its packages first on the path."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**settings_env(settings), "PYTHONPATH": str(worktree)}
    found = subprocess.run(
        [sys.executable, "-c", "import kairos, streams, schemas; print(streams.__file__)"],
        env=env,
        cwd=worktree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(found).resolve().is_relative_to(worktree.resolve()), found
    log_path = workdir / "worker.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "kairos.cli", "worker", "--workdir", str(workdir)],
        env=env,
        cwd=worktree,
        stdout=log_path.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return WorkerProcess(process, log_path)


def assigned_partitions(log: str) -> int:
    """How many partitions the worker's latest assignment gave it."""
    assignments = re.findall(r"Setting newly assigned partitions (\{.*?\}|set\(\))", log)
    return assignments[-1].count("TopicPartition(") if assignments else 0


async def configure_as_before(
    settings: Settings, producer: AIOKafkaProducer, **changes: int
) -> bool:
    """Change the scheduler config with the `config.updated` a v0.42.0 API sends (the fields
    it knows), and wait until the workers are told; False if they never are."""
    event = config_updated(**changes).model_dump(mode="json")
    event["changes"] = changes
    await publish(
        producer, settings.topics.schedule_changes, CONFIG_KEY, json.dumps(event).encode()
    )
    control = settings.topics.scheduler_control
    async with Collector(settings, control) as records:
        try:
            await records.wait_for(
                lambda: any(
                    changes.items() <= message.get("config", {}).items()
                    for message in records.values(control)
                ),
                timeout=30,
                what=f"the config {changes} published",
            )
        except AssertionError:
            return False
    await asyncio.sleep(5 * FETCH_MAX_WAIT_MS / 1000)
    return True


def decoded_by_release(worktree: Path, adapter: str, raw: bytes) -> str:
    """What the release's `streams.codec.decode(codec.<adapter>, raw)` makes of `raw`: the
    message's type name, or the error it raises."""
    script = (
        "import sys\n"
        "from streams import codec\n"
        "try:\n"
        f"    print(type(codec.decode(codec.{adapter}, sys.stdin.buffer.read())).__name__)\n"
        "except Exception as error:\n"
        "    print(type(error).__name__, error)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        input=raw,
        env={**os.environ, "PYTHONPATH": str(worktree)},
        cwd=worktree,
        capture_output=True,
        check=True,
    ).stdout.decode()


def test_a_v0_42_0_worker_cannot_read_the_config_todays_worker_publishes(
    old_release: Path,
) -> None:
    """Why docs/upgrading.md says: no config change while both releases run.

    A config change is applied by one worker and published on the control topic, which
    every worker reads. The release's worker skips today's record (`unreadable record on the
    control topic skipped`): its hosts keep the config before, and its next change would be
    numbered from there. Its own record reads today (defaults fill the new fields).
    """
    today = codec.encode(ConfigPublished(config=SchedulerConfig(version=2)))
    refused = decoded_by_release(old_release, "control_message", today)
    assert refused.startswith("Undecodable"), (
        f"the {RELEASE} worker now reads today's config: docs/upgrading.md can drop the rule"
    )
    assert "Extra inputs are not permitted" in refused, refused
    known = subprocess.run(
        [
            sys.executable,
            "-c",
            "from schemas.config import SchedulerConfig as C; print(*C.model_fields)",
        ],
        env={**os.environ, "PYTHONPATH": str(old_release)},
        cwd=old_release,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    before = json.loads(today)
    before["config"] = {k: v for k, v in before["config"].items() if k in known}
    assert decoded_by_release(old_release, "control_message", json.dumps(before).encode()) == (
        "ConfigPublished\n"
    )
    assert isinstance(
        codec.decode(codec.control_message, json.dumps(before).encode()), ConfigPublished
    )


def read_model_versions(database_url: str) -> dict[str, int]:
    with psycopg.connect(database_url) as conn:
        cursor = conn.execute("SELECT host_id, version FROM host_schedule WHERE NOT deleted")
        return {row[0]: row[1] for row in cursor}


async def test_a_rolling_upgrade_from_v0_42_0_loses_nothing_and_issues_nothing_twice(
    make_settings: Callable[..., Settings],
    broker_kind: str,
    old_release: Path,
    tmp_path: Path,
    workers: Callable[[Settings], WorkerProcess],
    projectors: Callable[[Settings], ProjectorProcess],
) -> None:
    if broker_kind == "tansu":
        pytest.skip("a group changing members is proved on Apache Kafka; tansu stalls rejoins")
    settings = make_settings(
        clock_speed=TWO_MINUTES_PER_SECOND,
        clock_origin=datetime.now(UTC),
        tick_seconds=0.1,
        projector_enabled=False,
    )
    names = settings.topics
    hosts = [f"rolling-{number:03d}" for number in range(HOSTS)]
    projectors(settings)  # Upgraded first (docs/upgrading.md).
    old = start_old_worker(settings, old_release, tmp_path / "old-worker")
    started: list[WorkerProcess] = [old]
    producer = await start_producer(settings)
    try:
        old.wait_ready()
        async with (
            Collector(settings, names.scan_commands, hosts_changelog(settings)) as log,
            Collector(settings, names.dead_letters) as dead,
            ScannerFleet(settings, score_for=always(10)) as fleet,
        ):
            # Today's `config.updated` names fields the release does not know: its worker
            # refuses it (a dead letter), so the API is upgraded after the workers.
            await publish(
                producer,
                names.schedule_changes,
                CONFIG_KEY,
                config_updated(max_concurrent_scans=CAP),
            )
            await wait_until(
                lambda: dead.values(names.dead_letters), timeout=30, what="today's config refused"
            )
            refused = dead.values(names.dead_letters)
            assert "Extra inputs are not permitted" in json.dumps(refused), refused
            assert await configure_as_before(
                settings,
                producer,
                max_concurrent_scans=CAP,
                interval_critical=15,
                scan_timeout_seconds=3600,
            ), f"the {RELEASE} worker did not apply a config.updated of its own API"
            refused_before_upgrade = len(refused)
            for host in hosts:
                await publish(producer, names.object_created, host, host_created(host))

            def commands_since(mark: int) -> Counter[str]:
                return Counter(command["host_id"] for command in fleet.commands[mark:])

            def every_host(mark: int, times: int) -> Callable[[], bool]:
                return lambda: all(commands_since(mark)[host] >= times for host in hosts)

            await wait_until(every_host(0, 1), timeout=90, what=f"the {RELEASE} worker scans")

            new = workers(settings)  # today's, into the same group
            started.append(new)
            joined = len(fleet.commands)
            await wait_until(every_host(joined, 2), timeout=90, what="two cycles with both workers")
            assert assigned_partitions(new.log()) > 0, "today's worker got no partition"
            assert assigned_partitions(old.log()) > 0, f"the {RELEASE} worker lost every partition"

            old.stop()  # SIGTERM
            assert old.process.returncode is not None
            stopped = len(fleet.commands)
            await wait_until(
                every_host(stopped, CYCLES_AFTER_STOP),
                timeout=120,
                what=f"{CYCLES_AFTER_STOP} cycles of every host after the {RELEASE} worker left",
            )
            answered_before = set(fleet.answered)
            await asyncio.sleep(3.0)  # the last answers read and applied

            states = log.host_states(settings)
            applied_scans = {state.last_scan_id for state in states}
            commands = list(fleet.commands)
            dead_letters = dead.values(names.dead_letters)[refused_before_upgrade:]
            latest_versions: dict[str, int] = {}
            for state in states:
                latest_versions[state.host_id] = max(
                    state.version, latest_versions.get(state.host_id, 0)
                )
            await wait_until(
                lambda: read_model_versions(settings.database_url) == latest_versions,
                timeout=30,
                what="the read model at every host's latest version",
            )
    finally:
        await producer.stop()
        for worker in started:
            worker.stop()

    assert not dead_letters, dead_letters[:3]
    for worker in started:
        assert "Traceback" not in worker.log(), worker.log()[-4000:]

    # Every result applied: the scan id of every answered command is on its host's state.
    unapplied = {f"scan-{command_id[:8]}" for command_id in answered_before} - applied_scans
    assert not unapplied, f"{len(unapplied)} results never applied: {sorted(unapplied)[:5]}"

    # One command id per due instance, and one due instance per command id.
    ids_by_instance: dict[tuple[str, str, int], set[str]] = defaultdict(set)
    instances_by_id: dict[str, set[tuple[str, str, int]]] = defaultdict(set)
    for command in commands:
        instance = (command["host_id"], command["due_at"], command["attempt"])
        ids_by_instance[instance].add(command["command_id"])
        instances_by_id[command["command_id"]].add(instance)
    assert all(len(ids) == 1 for ids in ids_by_instance.values())
    assert all(len(found) == 1 for found in instances_by_id.values())

    # An id comes back only as the re-send of the commands in flight when the dispatch
    # partition's owner rebuilds its queue (streams/stages/dispatcher.py): never more than
    # the workers say they sent again, never more than the cap at one rebuild.
    sent = Counter(command["command_id"] for command in commands)
    again = {command_id: count - 1 for command_id, count in sent.items() if count > 1}
    rebuilds = [int(count) for worker in started for count in SENT_AGAIN.findall(worker.log())]
    assert all(count <= CAP for count in rebuilds), rebuilds
    assert sum(again.values()) <= sum(rebuilds), (again, rebuilds)
    report = {"commands": len(commands), "sent_again": sum(again.values()), "rebuilds": rebuilds}
    print(json.dumps(report))  # noqa: T201 - shown with -s
