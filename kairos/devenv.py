"""Where a `kairos dev` stack runs, told to the rest of the machine.

`kairos dev` writes `<home>/dev.env` (shell `export` lines: bootstrap servers, database URL,
API URL, a development token) and holds `<home>/dev.lock` while it runs. Every other `kairos`
command reads `dev.env` from `./.kairos/` (or the nearest parent directory that has one) when
the environment names no stack of its own, so a second shell needs no exports.

Ports are remembered in `<home>/ports.json` and reused at the next start when still free.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

DEV_HOME = ".kairos"
DEV_ENV_FILE = "dev.env"
LOCK_FILE = "dev.lock"
PORTS_FILE = "ports.json"

API_URL_VAR = "KAIROS_API_URL"
TOKEN_VAR = "KAIROS_TOKEN"
DEFAULT_API_URL = "http://127.0.0.1:8000"

STACK_VARS = ("KAFKA_BOOTSTRAP_SERVERS", "DATABASE_URL", API_URL_VAR)
"""If the environment sets any of these, it describes its own stack and dev.env is ignored."""


def find_dev_env(start: Path | None = None) -> Path | None:
    """`.kairos/dev.env` in `start` (default: the working directory) or its nearest parent."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / DEV_HOME / DEV_ENV_FILE
        if candidate.is_file():
            return candidate
    return None


def read_env_file(path: Path) -> dict[str, str]:
    """`KEY=value` or `export KEY=value` lines (shell-quoted values); comments skipped."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        key, sep, raw = line.partition("=")
        if not sep:
            continue
        parts = shlex.split(raw) if raw else [""]
        values[key.strip()] = parts[0] if parts else ""
    return values


def apply_dev_env(environ: dict[str, str] | Any = None) -> Path | None:
    """Fill unset variables from the nearest dev.env; return its path if it was used.

    Nothing is read when the environment already names a stack (any of `STACK_VARS`),
    so an explicit environment always wins over a file.
    """
    env = os.environ if environ is None else environ
    if any(env.get(name) for name in STACK_VARS):
        return None
    path = find_dev_env()
    if path is None:
        return None
    for key, value in read_env_file(path).items():
        env.setdefault(key, value)
    return path


def export_lines(values: dict[str, str]) -> list[str]:
    return [f"export {key}={shlex.quote(value)}" for key, value in values.items()]


def write_dev_env(home: Path, values: dict[str, str]) -> Path:
    """Write `<home>/dev.env` (mode 0600: it holds a token) and return its path."""
    path = home / DEV_ENV_FILE
    text = "# Written by `kairos dev`; `kairos` commands run under this folder read it.\n"
    text += "\n".join(export_lines(values)) + "\n"
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    temporary.replace(path)
    return path


def remembered_ports(home: Path) -> dict[str, int]:
    try:
        saved = json.loads((home / PORTS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): int(v) for k, v in saved.items() if isinstance(v, int)}


def remember_ports(home: Path, ports: dict[str, int]) -> None:
    (home / PORTS_FILE).write_text(json.dumps(ports, indent=2, sort_keys=True) + "\n")


def stable_port(home: Path, name: str, preferred: int | None = None) -> int:
    """The port remembered for `name` if free, else `preferred` if free, else a free one."""
    from kairos.localstack.ports import free_port

    for candidate in (remembered_ports(home).get(name), preferred):
        if candidate and _listenable(candidate):
            return candidate
    return free_port()


def _listenable(port: int) -> bool:
    """True if a server could listen on 127.0.0.1:port now. SO_REUSEADDR, as servers set it,
    so the port of a server that just stopped (TIME_WAIT) still counts as free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(1)
        except OSError:
            return False
        return True


class AlreadyRunning(RuntimeError):
    """Another `kairos dev` holds this folder's lock; the message says where it runs."""


@dataclass
class DevLock:
    """An exclusive lock on `<home>/dev.lock`, held for the life of one `kairos dev`.

    The file also tells others what holds it (pid, URLs), as JSON. The lock is an
    advisory `flock`, released by the kernel however the process ends.
    """

    home: Path
    handle: IO[str] | None = None

    @property
    def path(self) -> Path:
        return self.home / LOCK_FILE

    def acquire(self) -> None:
        handle = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read()
            handle.close()
            raise AlreadyRunning(describe_holder(self.home, holder)) from None
        self.handle = handle
        self.describe({"pid": os.getpid(), "state": "starting"})

    def describe(self, details: dict[str, Any]) -> None:
        if self.handle is None:
            return
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(json.dumps(details, indent=2, sort_keys=True) + "\n")
        self.handle.flush()

    def release(self) -> None:
        handle, self.handle = self.handle, None
        if handle is not None:
            with contextlib.suppress(OSError):
                handle.seek(0)
                handle.truncate()
            handle.close()


def describe_holder(home: Path, holder: str) -> str:
    try:
        details = json.loads(holder)
    except ValueError:
        details = {}
    where = f"kairos dev is already running in {home.parent}"
    if "pid" in details:
        where += f" (pid {details['pid']}"
        where += f", {details['state']})" if details.get("state") == "starting" else ")"
    parts = [where]
    if details.get("api_url"):
        parts.append(f"API {details['api_url']}")
    if details.get("kafka"):
        parts.append(f"Kafka {details['kafka']}")
    if details.get("database"):
        parts.append(f"PostgreSQL {details['database']}")
    parts.append(f"its settings are in {home / DEV_ENV_FILE}")
    return "; ".join(parts)
