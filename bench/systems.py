"""Systems under test that read the same input topics and emit scan-commands.

`KairosSystem` runs `kairos worker` processes with their in-process projector off, plus one
`kairos projector` beside them, as docker-compose.yml deploys Kairos; `HeapqSystem` runs the
bare heapq baseline.
Both take the same events (object-created, scan-completed) and config knobs, so a
scenario drives either through the same code and reads the same fields back.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any

from bench.kafka_io import Offsets, create_topics, start_producer
from bench.load import update_config
from bench.stack import BenchStack, ChildProcess, wait_ready
from kairos.cli import PROJECTOR_STARTED_LINE
from kairos.floor.settings import Settings
from streams.topology import HOSTS

HOST_KEYED_TABLES = ("hosts", "schedules", "schedule-fanouts", "schedule-commands")
"""The worker's Faust tables partitioned like the host topics (the dispatcher's has one)."""


@dataclass
class KairosSystem:
    stack: BenchStack
    stem: str
    workers: int = 1
    name: str = "kairos"
    static_membership: bool = False
    """Each worker joins under a stable `group_instance_id` (worker 0, 1, …), as pods of a
    StatefulSet do; a replacement started under a killed worker's id takes its place."""
    settings: Settings = field(init=False)
    processes: list[ChildProcess] = field(default_factory=list)
    """The workers only, oldest first (recovery kills `processes[0]`)."""
    projector: ChildProcess | None = None

    def __post_init__(self) -> None:
        self.settings = self.stack.settings(self.stem, projector_enabled=False)

    @property
    def label(self) -> str:
        static = ", static membership" if self.static_membership else ""
        plural = "s" if self.workers > 1 else ""
        return f"Kairos ({self.workers} worker{plural} + projector{static})"

    @property
    def group(self) -> str:
        return f"{self.settings.topic_prefix}{self.settings.app_id}"

    def input_topics(self) -> list[str]:
        names = self.settings.topics
        return [
            names.object_created,
            names.schedule_changes,
            names.scan_completed,
            names.host_signals,
            names.dispatch_queue,
        ]

    def pids(self) -> dict[str, int]:
        """Workers as `worker0`, `worker1`, … and the projector as `projector`, while alive."""
        alive = [p for p in self.processes if p.alive()]
        pids = {f"worker{index}": p.pid for index, p in enumerate(alive)}
        if self.projector is not None and self.projector.alive():
            pids["projector"] = self.projector.pid
        return pids

    async def start_worker(self) -> ChildProcess:
        settings = self.settings
        if self.static_membership:
            alive = sum(1 for process in self.processes if process.alive())
            instance = f"{self.stem}-worker-{alive}"
            settings = settings.model_copy(update={"group_instance_id": instance})
        worker = self.stack.start_worker(settings, name=f"{self.stem}-worker")
        self.processes.append(worker)
        await asyncio.to_thread(wait_ready, worker, 180.0)
        return worker

    async def start_projector(self) -> ChildProcess:
        projector = self.stack.start_projector(self.settings, name=f"{self.stem}-projector")
        self.projector = projector
        await asyncio.to_thread(wait_ready, projector, 120.0, PROJECTOR_STARTED_LINE)
        return projector

    def projected_topics(self) -> list[str]:
        """The projector's inputs that carry per-host rows (it follows a few more)."""
        names = self.settings.topics
        return [HOSTS.changelog(self.settings), names.scan_commands, names.scan_completed]

    @property
    def projector_group(self) -> str:
        return f"{self.group}-projector"

    async def precreate_faust_topics(self) -> None:
        """Create Faust's changelog and leader topics before the first worker starts.

        On a fresh deployment Faust creates them itself, but its consumer can snapshot the
        changelog with 0 partitions first; the dispatcher agent then crashes with
        PartitionsMismatch on every message and restarts every 5 s until the metadata is
        refreshed (up to metadata.max.age = 5 min). Seen on this machine: 2,000 hosts, no
        command for 80 s. Pre-creating the topics (as an operator would) avoids the race;
        `dispatcher_crashes()` still counts any occurrence.
        """
        group, partitions = self.group, self.settings.partitions
        changelogs = {f"{group}-{table}-changelog": partitions for table in HOST_KEYED_TABLES}
        changelogs[f"{group}-dispatcher-changelog"] = 1
        await create_topics(
            self.settings,
            {**changelogs, f"{group}-__assignor-__leader": 1},
            {name: {"cleanup.policy": "compact"} for name in changelogs},
        )

    def dispatcher_crashes(self) -> int:
        return sum(p.log_text().count("PartitionsMismatch(") for p in self.processes)

    async def start(self, **config: Any) -> None:
        await self.precreate_faust_topics()
        await asyncio.gather(
            *(self.start_worker() for _ in range(self.workers)), self.start_projector()
        )
        producer = await start_producer(self.settings)
        try:
            await update_config(producer, self.settings, **config)
        finally:
            await producer.stop()
        # The host stage turns the change into a control record every worker reads.
        async with Offsets(self.settings) as offsets:
            deadline = time.monotonic() + 60
            while await offsets.total(self.settings.topics.scheduler_control) < 1:
                if time.monotonic() > deadline:
                    raise TimeoutError("the config change never reached the control topic")
                await asyncio.sleep(0.2)
        await asyncio.sleep(2.0)  # every worker polls the control topic twice a second

    async def processed_results(self, offsets: Offsets) -> int:
        """Host changes so far (records of the hosts changelog): every accepted result
        produces exactly one."""
        return await offsets.total(HOSTS.changelog(self.settings))

    def stop(self) -> None:
        for process in self.processes:
            process.stop(grace=10.0)
        if self.projector is not None:
            self.projector.stop(grace=10.0)


@dataclass
class HeapqSystem:
    stack: BenchStack
    stem: str
    name: str = "heapq"
    label: str = "heapq + aiokafka"
    settings: Settings = field(init=False)
    processes: list[ChildProcess] = field(default_factory=list)
    _args: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.settings = self.stack.settings(self.stem)

    @property
    def group(self) -> str:
        return f"{self.settings.topic_prefix}heapq"

    def input_topics(self) -> list[str]:
        return [self.settings.topics.object_created, self.settings.topics.scan_completed]

    def pids(self) -> dict[str, int]:
        alive = [p for p in self.processes if p.alive()]
        return {f"heapq{index}": p.pid for index, p in enumerate(alive)}

    async def start_worker(self) -> ChildProcess:
        child = self.stack.start_python_module(
            f"{self.stem}-heapq", "bench.baselines.heapq_dispatch", self._args
        )
        self.processes.append(child)
        await asyncio.to_thread(wait_ready, child, 300.0, "heapq ready")
        return child

    async def start(self, **config: Any) -> None:
        names = self.settings.topics
        partitions = self.settings.partitions
        await create_topics(
            self.settings,
            {names.object_created: partitions, names.scan_completed: partitions,
             names.scan_commands: partitions},
        )  # fmt: skip
        self._args = [
            "--bootstrap", self.settings.kafka_bootstrap_servers,
            "--prefix", self.settings.topic_prefix,
            "--group", self.group,
            "--spread-seconds", str(config.get("initial_spread_seconds", 0)),
            "--cap", str(config.get("max_concurrent_scans", 100_000)),
        ]  # fmt: skip
        await self.start_worker()

    def progress_lines(self) -> list[tuple[float, int, int]]:
        """(wall time, results applied, commands issued) reported by the live process."""
        found = []
        for process in self.processes:
            for match in _PROGRESS.finditer(process.log_text()):
                found.append((float(match[1]), int(match[3]), int(match[4])))
        return found

    async def processed_results(self, offsets: Offsets) -> int:
        lines = self.progress_lines()
        return lines[-1][1] if lines else 0

    def stop(self) -> None:
        for process in self.processes:
            process.stop(grace=5.0)


_PROGRESS = re.compile(r"progress t=([\d.]+) created=(\d+) results=(\d+) issued=(\d+)")

System = KairosSystem | HeapqSystem
