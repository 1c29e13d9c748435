"""The worker's liveness: a heartbeat file for supervisors, and an exit when the runtime dies.

Faust can lose a part of its runtime without stopping the process: a crashed producer buffer
(for example after a send the broker refused) leaves the worker out of its group, alive and
doing nothing, and no supervisor restarts it. The watchdog looks at the runtime's services every
second; while all run it rewrites the heartbeat file, and when one has crashed it logs one line
and ends the process with EXIT_RUNTIME_CRASHED so the supervisor starts a fresh worker. A wedged
event loop stops the heartbeat too, so a probe of the file's age catches that as well.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

EXIT_RUNTIME_CRASHED = 70
"""EX_SOFTWARE: the worker's runtime crashed; restart it."""
HEARTBEAT_FILE = "alive"
"""Inside the worker's workdir; holds the wall-clock time of the last healthy check."""


def heartbeat_age(workdir: Path, *, now: float | None = None) -> float | None:
    """Seconds since the worker at `workdir` last reported itself alive; None if it never did."""
    try:
        beat = float((workdir / HEARTBEAT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return (time.time() if now is None else now) - beat


class Watchdog:
    """Writes the heartbeat while the runtime runs; exits the process when a part crashed."""

    def __init__(self, app: Any, workdir: Path, *, interval_seconds: float = 1.0) -> None:
        self.app = app
        self.heartbeat = workdir / HEARTBEAT_FILE
        self.interval_seconds = interval_seconds

    async def run(self) -> None:
        while True:
            crashed = next(self._crashed_services(), None)
            if crashed is not None:
                name, reason = crashed
                log.critical(
                    "kairos: the worker's %s crashed (%r); exiting with %d so a supervisor"
                    " starts a fresh worker",
                    name,
                    reason,
                    EXIT_RUNTIME_CRASHED,
                )
                logging.shutdown()
                os._exit(EXIT_RUNTIME_CRASHED)  # Faust's shutdown can hang on the crashed part.
            self._beat()
            await asyncio.sleep(self.interval_seconds)

    def healthy(self, *, max_age_seconds: float = 5.0) -> bool:
        """No part of the runtime has crashed, and the loop beat recently."""
        age = heartbeat_age(self.heartbeat.parent)
        fresh = age is not None and age <= max_age_seconds
        return fresh and next(self._crashed_services(), None) is None

    def _crashed_services(self) -> Iterator[tuple[str, BaseException | None]]:
        app = self.app
        parts: list[tuple[str, Any]] = [
            ("app", app),
            ("producer", app.producer),
            ("producer buffer", getattr(app.producer, "buffer", None)),
            ("consumer", app.consumer),
            ("fetcher", app._fetcher),
            ("conductor", app.topics),
            ("table manager", app.tables),
        ]
        parts += [(f"agent {agent.name}", agent) for agent in app.agents.values()]
        for name, service in parts:
            if service is not None and service.crashed:
                yield name, service.crash_reason

    def _beat(self) -> None:
        partial = self.heartbeat.with_suffix(".tmp")
        partial.write_text(f"{time.time():.3f}")
        partial.replace(self.heartbeat)
