"""Apache Kafka in KRaft mode, run from Maven-fetched jars, for local development and tests.

``fetch_kafka_jars`` materialises the broker's runtime classpath once per cache
directory; ``ApacheKafkaCluster`` runs one or three combined broker+controller
nodes from it, keeping their data, cluster id and ports in a base directory so
that a persistent directory survives restarts with its topics intact.
"""

from __future__ import annotations

import atexit
import base64
import fcntl
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType

from kairos.localstack.errors import LocalStackError
from kairos.localstack.ports import (
    LOOPBACK,
    free_port,
    port_is_free,
    signal_process_group,
    stop_process_groups,
    wait_for_kafka_brokers,
)

logger = logging.getLogger(__name__)

KAFKA_VERSION = "4.1.1"
SLF4J_VERSION = "2.0.17"
MINIMUM_JAVA_MAJOR = 17
DEFAULT_JARS_CACHE_DIR = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "kairos"
    / f"kafka-{KAFKA_VERSION}"
)

_COMPLETE_MARKER = ".complete"
_LAYOUT_FILE = "cluster.json"
_STOP_GRACE_SECONDS = 20.0
_LOG_TAIL_LINES = 40

# slf4j-api is pinned directly because Kafka's own dependency tree resolves 1.7.x,
# which does not bind to slf4j-simple 2.x and would silence all broker logging.
_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kairos.localstack</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>{KAFKA_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{KAFKA_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>{SLF4J_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>{SLF4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"""


def _java_major_version() -> int | None:
    java = shutil.which("java")
    if java is None:
        return None
    try:
        result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    # Java 8 and older report themselves as "1.<major>".
    if major == 1 and match.group(2):
        major = int(match.group(2))
    return major


def _jars_complete(libs_dir: Path) -> bool:
    marker = libs_dir / _COMPLETE_MARKER
    return marker.is_file() and marker.read_text().strip() == KAFKA_VERSION


def java_and_maven_available(cache_dir: Path = DEFAULT_JARS_CACHE_DIR) -> bool:
    """Return True if Kafka can run here: Java >= 17 is on PATH and the jars are
    either already complete in ``cache_dir`` or fetchable because ``mvn`` is on PATH."""
    java_major = _java_major_version()
    if java_major is None or java_major < MINIMUM_JAVA_MAJOR:
        return False
    return _jars_complete(Path(cache_dir) / "libs") or shutil.which("mvn") is not None


def fetch_kafka_jars(cache_dir: Path = DEFAULT_JARS_CACHE_DIR) -> Path:
    """Ensure the Kafka broker runtime jars are in ``cache_dir/libs`` and return that directory.

    Idempotent: once a complete download is recorded by a marker file, Maven is
    not invoked again. Concurrent callers (e.g. parallel test workers) serialise
    on a lock file. Raises ``LocalStackError`` if java or mvn is missing or Maven fails.
    """
    cache_dir = Path(cache_dir).resolve()
    libs_dir = cache_dir / "libs"
    if _jars_complete(libs_dir):
        return libs_dir

    java_major = _java_major_version()
    if java_major is None or java_major < MINIMUM_JAVA_MAJOR:
        raise LocalStackError(
            f"Apache Kafka {KAFKA_VERSION} needs Java {MINIMUM_JAVA_MAJOR}+ on PATH "
            f"(found: {java_major or 'none'})."
        )
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalStackError(
            "Fetching the Apache Kafka jars needs Maven ('mvn') on PATH, and it was not found."
        )

    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _jars_complete(libs_dir):
            return libs_dir
        # A previous interrupted download may have left a partial or mixed set of jars.
        shutil.rmtree(libs_dir, ignore_errors=True)
        pom = cache_dir / "pom.xml"
        pom.write_text(_POM)
        command = [
            mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={libs_dir}",
        ]  # fmt: skip
        logger.info("fetching Kafka %s jars into %s", KAFKA_VERSION, libs_dir)
        try:
            result = subprocess.run(
                command,
                cwd=cache_dir,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=900,
            )
        except subprocess.TimeoutExpired as exc:
            raise LocalStackError(
                f"Maven did not finish fetching the Kafka jars within {exc.timeout:.0f} s."
            ) from exc
        if result.returncode != 0:
            # Maven 3.8 emits ANSI resets even in batch mode with colour disabled.
            tail = _tail(re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr))
            raise LocalStackError(
                f"Maven failed (exit {result.returncode}) to fetch the Kafka jars:\n{tail}"
            )
        (libs_dir / _COMPLETE_MARKER).write_text(KAFKA_VERSION)
    return libs_dir


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _file_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 64 * 1024))
            return _tail(log.read().decode(errors="replace"), lines)
    except OSError:
        return "(no log)"


def _new_cluster_id() -> str:
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        # Kafka's own generator rejects ids starting with '-': CLI parsers take them for options.
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass(frozen=True)
class KafkaListener:
    """An extra client listener on every node, beside the PLAINTEXT one every cluster has.

    ``name`` is the listener name (``SASL_SSL``, ``MTLS``...), ``protocol`` its security
    protocol (``SSL``, ``SASL_SSL``, ``SASL_PLAINTEXT``). ``properties`` are written as
    ``listener.name.<name in lower case>.<key>=<value>`` (keystores, ``ssl.client.auth``,
    ``sasl.enabled.mechanisms``, a mechanism's ``sasl.jaas.config``). Inter-broker traffic
    and the readiness probe keep using the PLAINTEXT listener.
    """

    name: str
    protocol: str
    properties: Mapping[str, object] = field(default_factory=dict)


@dataclass
class _NodeLayout:
    node_id: int
    port: int
    controller_port: int


class ApacheKafkaCluster:
    """One or three combined broker+controller Kafka nodes on 127.0.0.1.

    All state lives under ``base_dir``: ``cluster.json`` (cluster id and ports)
    and ``node-<i>/`` (``server.properties``, ``data/``, ``kafka.log``). Reusing a
    base directory restarts the same cluster with its data, on the same ports
    when they are still free. Node indexes are 0-based; Kafka node ids are index+1.

    With ``nodes=3`` every node is a controller voter and topics default to
    replication factor 3 with ``min.insync.replicas=2``, so the cluster keeps
    accepting ``acks=all`` writes with one node down. Topics are never auto-created.

    ``listeners`` adds secured client listeners on ports picked at the first start
    (``listener_servers(name)`` gives their addresses); ``scram_users`` (name to password)
    become SCRAM-SHA-256 and SCRAM-SHA-512 credentials when the storage is formatted.
    """

    def __init__(
        self,
        base_dir: Path,
        *,
        nodes: int = 1,
        libs_dir: Path | None = None,
        heap: str = "512m",
        listeners: Sequence[KafkaListener] = (),
        scram_users: Mapping[str, str] | None = None,
    ) -> None:
        if nodes not in (1, 3):
            raise ValueError(f"nodes must be 1 or 3, got {nodes}")
        reserved = {"PLAINTEXT", "CONTROLLER"}
        names = [listener.name.upper() for listener in listeners]
        if reserved & set(names) or len(set(names)) != len(names):
            raise ValueError(f"listener names must be unique and not {sorted(reserved)}: {names}")
        self.listeners = tuple(listeners)
        self.scram_users = dict(scram_users or {})
        self._listener_ports: dict[tuple[int, str], int] = {}
        self.base_dir = Path(base_dir).resolve()
        self.nodes = nodes
        self.heap = heap
        self._libs_dir = Path(libs_dir).resolve() if libs_dir is not None else None
        self._cluster_id = ""
        self._layout: list[_NodeLayout] = []
        self._processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def bootstrap_servers(self) -> str:
        """Comma-joined ``127.0.0.1:port`` of every node (including stopped ones)."""
        if not self._layout:
            raise LocalStackError("The Kafka cluster has no ports yet; call start() first.")
        return ",".join(f"{LOOPBACK}:{node.port}" for node in self._layout)

    def listener_servers(self, name: str) -> str:
        """Comma-joined ``127.0.0.1:port`` of every node's listener ``name`` (see ``listeners``)."""
        ports = [self._listener_ports.get((index, name.upper())) for index in range(self.nodes)]
        if not all(ports):
            raise LocalStackError(f"The Kafka cluster has no started listener {name!r}.")
        return ",".join(f"{LOOPBACK}:{port}" for port in ports)

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def log_path(self, index: int) -> Path:
        """The file that receives node ``index``'s stdout and stderr."""
        return self._node_dir(index) / "kafka.log"

    def is_running(self, index: int) -> bool:
        process = self._processes.get(index)
        return process is not None and process.poll() is None

    def start(self, timeout: float = 60.0) -> None:
        """Start every node that is not running and block until all are registered brokers.

        Formats a node's storage only the first time. Raises ``LocalStackError``
        (with the tail of the node logs) if the cluster is not ready within
        ``timeout`` seconds or a node exits; no node is left running in that case.
        """
        libs_dir = self._ensure_libs()
        if not self._layout:
            self._load_or_create_layout()
        self._write_server_properties()
        self._format_new_nodes(libs_dir)
        atexit.register(self.stop)
        started = time.monotonic()
        try:
            for index in range(self.nodes):
                self._spawn(index, libs_dir)
            self._wait_until_brokers(set(range(self.nodes)), timeout)
        except (TimeoutError, ChildProcessError) as exc:
            logs = "\n".join(
                f"--- {self.log_path(index)} ---\n{_file_tail(self.log_path(index))}"
                for index in range(self.nodes)
            )
            self.stop()
            raise LocalStackError(
                f"The Kafka cluster in {self.base_dir} did not become ready: {exc}.\n{logs}"
            ) from exc
        except BaseException:
            self.stop()
            raise
        logger.info(
            "Kafka cluster ready at %s after %.1f s",
            self.bootstrap_servers,
            time.monotonic() - started,
        )

    def start_node(self, index: int, timeout: float = 60.0) -> None:
        """Restart node ``index`` (after ``kill_node``); block until it is a broker again.

        Raises ``LocalStackError`` with the node's log tail if it is not back in
        time; that node is then killed again, the others are left alone.
        """
        if not self._layout:
            raise LocalStackError("start_node() needs a started cluster; call start() first.")
        self._spawn(index, self._ensure_libs())
        try:
            self._wait_until_brokers({index}, timeout)
        except (TimeoutError, ChildProcessError) as exc:
            tail = _file_tail(self.log_path(index))
            self.kill_node(index)
            raise LocalStackError(
                f"Kafka node {index} did not rejoin the cluster: {exc}.\n{tail}"
            ) from exc

    def kill_node(self, index: int) -> None:
        """SIGKILL node ``index`` (no controlled shutdown) and reap it."""
        process = self._processes.pop(index, None)
        if process is None:
            return
        signal_process_group(process, signal.SIGKILL)
        process.wait()

    def stop(self) -> None:
        """Stop every node: SIGTERM, up to 20 s for a clean shutdown, then SIGKILL. Idempotent."""
        processes = list(self._processes.values())
        self._processes.clear()
        stop_process_groups(processes, _STOP_GRACE_SECONDS)
        atexit.unregister(self.stop)

    def __enter__(self) -> ApacheKafkaCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _ensure_libs(self) -> Path:
        if self._libs_dir is None:
            self._libs_dir = fetch_kafka_jars()
        return self._libs_dir

    def _node_dir(self, index: int) -> Path:
        return self.base_dir / f"node-{index}"

    def _load_or_create_layout(self) -> None:
        layout_file = self.base_dir / _LAYOUT_FILE
        if layout_file.is_file():
            saved = json.loads(layout_file.read_text())
            if len(saved["nodes"]) != self.nodes:
                raise LocalStackError(
                    f"{self.base_dir} holds a {len(saved['nodes'])}-node Kafka cluster, "
                    f"not a {self.nodes}-node one."
                )
            self._cluster_id = saved["cluster_id"]
            self._layout = [_NodeLayout(**node) for node in saved["nodes"]]
        else:
            self._cluster_id = _new_cluster_id()
            self._layout = [
                _NodeLayout(node_id=index + 1, port=0, controller_port=0)
                for index in range(self.nodes)
            ]

        taken: set[int] = set()
        for node in self._layout:
            node.port = self._keep_or_replace_port(node.port, taken)
            node.controller_port = self._keep_or_replace_port(node.controller_port, taken)

        self.base_dir.mkdir(parents=True, exist_ok=True)
        layout_file.write_text(
            json.dumps(
                {"cluster_id": self._cluster_id, "nodes": [asdict(node) for node in self._layout]},
                indent=2,
            )
        )

    @staticmethod
    def _keep_or_replace_port(port: int, taken: set[int]) -> int:
        if port and port not in taken and port_is_free(port):
            taken.add(port)
            return port
        while (candidate := free_port()) in taken:
            pass
        taken.add(candidate)
        return candidate

    def _write_server_properties(self) -> None:
        replication = 3 if self.nodes == 3 else 1
        min_isr = 2 if self.nodes == 3 else 1
        voters = ",".join(
            f"{node.node_id}@{LOOPBACK}:{node.controller_port}" for node in self._layout
        )
        for index, node in enumerate(self._layout):
            node_dir = self._node_dir(index)
            (node_dir / "data").mkdir(parents=True, exist_ok=True)
            client_listener = f"PLAINTEXT://{LOOPBACK}:{node.port}"
            extra_listeners = "".join(
                f",{listener.name.upper()}://{LOOPBACK}:{self._listener_port(index, listener)}"
                for listener in self.listeners
            )
            extra_protocols = "".join(
                f",{listener.name.upper()}:{listener.protocol}" for listener in self.listeners
            )
            settings = {
                "process.roles": "broker,controller",
                "node.id": node.node_id,
                "controller.quorum.voters": voters,
                "listeners": f"{client_listener},CONTROLLER://{LOOPBACK}:{node.controller_port}"
                + extra_listeners,
                "advertised.listeners": client_listener + extra_listeners,
                "inter.broker.listener.name": "PLAINTEXT",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
                + extra_protocols,
                "log.dirs": node_dir / "data",
                "num.partitions": 1,
                "default.replication.factor": replication,
                "min.insync.replicas": min_isr,
                "offsets.topic.replication.factor": replication,
                "transaction.state.log.replication.factor": replication,
                "transaction.state.log.min.isr": min_isr,
                "group.initial.rebalance.delay.ms": 0,
                "auto.create.topics.enable": "false",
                "log.retention.hours": 24 * 365 * 10,
            }
            for listener in self.listeners:
                prefix = f"listener.name.{listener.name.lower()}."
                settings.update({prefix + key: value for key, value in listener.properties.items()})
            (node_dir / "server.properties").write_text(
                "".join(f"{key}={value}\n" for key, value in settings.items())
            )

    def _listener_port(self, index: int, listener: KafkaListener) -> int:
        key = (index, listener.name.upper())
        if key not in self._listener_ports:
            taken = {port for node in self._layout for port in (node.port, node.controller_port)}
            taken |= set(self._listener_ports.values())
            while (candidate := free_port()) in taken:
                pass
            self._listener_ports[key] = candidate
        return self._listener_ports[key]

    def _format_new_nodes(self, libs_dir: Path) -> None:
        pending = [
            index
            for index in range(self.nodes)
            if not (self._node_dir(index) / "data" / "meta.properties").is_file()
        ]
        formatters: dict[int, subprocess.Popen[bytes]] = {}
        try:
            for index in pending:
                node_dir = self._node_dir(index)
                with open(node_dir / "format.log", "wb") as output:
                    formatters[index] = subprocess.Popen(
                        [
                            "java",
                            "-Xmx256m",
                            "-cp",
                            f"{libs_dir}/*",
                            "kafka.tools.StorageTool",
                            "format",
                            "-t",
                            self._cluster_id,
                            "-c",
                            str(node_dir / "server.properties"),
                            *self._scram_arguments(),
                        ],
                        cwd=node_dir,
                        stdin=subprocess.DEVNULL,
                        stdout=output,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
            for index, formatter in formatters.items():
                if formatter.wait(timeout=180) != 0:
                    tail = _file_tail(self._node_dir(index) / "format.log")
                    raise LocalStackError(f"Formatting Kafka node {index} storage failed:\n{tail}")
        except subprocess.TimeoutExpired as exc:
            raise LocalStackError("Formatting Kafka storage did not finish within 180 s.") from exc
        finally:
            for formatter in formatters.values():
                if formatter.poll() is None:
                    signal_process_group(formatter, signal.SIGKILL)
                    formatter.wait()

    def _scram_arguments(self) -> list[str]:
        arguments = []
        for name, password in self.scram_users.items():
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                arguments += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
        return arguments

    def _spawn(self, index: int, libs_dir: Path) -> None:
        if self.is_running(index):
            return
        node_dir = self._node_dir(index)
        with open(self.log_path(index), "ab") as log:
            self._processes[index] = subprocess.Popen(
                [
                    "java",
                    f"-Xmx{self.heap}",
                    "-Djava.awt.headless=true",
                    "-cp",
                    f"{libs_dir}/*",
                    "kafka.Kafka",
                    str(node_dir / "server.properties"),
                ],
                cwd=node_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        logger.info(
            "started Kafka node %d (pid %d), log %s",
            index,
            self._processes[index].pid,
            self.log_path(index),
        )

    def _wait_until_brokers(self, indexes: set[int], timeout: float) -> None:
        wait_for_kafka_brokers(
            self.bootstrap_servers,
            {self._layout[index].node_id for index in indexes},
            timeout,
            still_running=lambda: all(self.is_running(index) for index in indexes),
        )
