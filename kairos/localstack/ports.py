"""Plumbing shared by the local services: loopback ports, readiness probes, process groups."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free at the time of the call.

    Another process may grab it before the caller binds it; callers that start
    a server on it must surface a bind failure rather than assume success.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Return True if ``host:port`` can be bound right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def wait_for_port(host: str, port: int, timeout: float) -> None:
    """Block until a TCP connection to ``host:port`` succeeds.

    Raises ``TimeoutError`` if no connection succeeded within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"nothing accepted connections on {host}:{port} within {timeout:.0f} s"
                ) from None
            time.sleep(0.2)


def kafka_broker_ids(bootstrap_servers: str, timeout: float = 5.0) -> set[int]:
    """Return the node ids of the brokers that a Kafka metadata request reports.

    Raises whatever aiokafka raises when no bootstrap server answers. The request
    runs on a private event loop in a worker thread, so this is safe to call from
    synchronous code that itself runs inside an event loop.
    """
    from aiokafka.client import AIOKafkaClient

    async def fetch() -> set[int]:
        client = AIOKafkaClient(
            bootstrap_servers=bootstrap_servers, request_timeout_ms=int(timeout * 1000)
        )
        try:
            await client.bootstrap()
            return {broker.nodeId for broker in client.cluster.brokers()}
        finally:
            await client.close()

    with ThreadPoolExecutor(max_workers=1) as executor:
        return executor.submit(asyncio.run, fetch()).result(timeout=timeout + 5.0)


def _any_server_accepts(bootstrap_servers: str) -> bool:
    for address in bootstrap_servers.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return True
        except OSError:
            continue
    return False


def wait_for_kafka_brokers(
    bootstrap_servers: str,
    expected_ids: set[int] | None,
    timeout: float,
    *,
    still_running: Callable[[], bool] = lambda: True,
) -> None:
    """Block until cluster metadata lists every broker in ``expected_ids`` (``None``: any broker).

    Raises ``TimeoutError`` after ``timeout`` seconds, and ``ChildProcessError``
    as soon as ``still_running()`` returns False (so a crashed server fails fast
    instead of burning the whole timeout).
    """
    deadline = time.monotonic() + timeout
    seen: set[int] = set()
    while True:
        if not still_running():
            raise ChildProcessError(
                "the server process exited while waiting for it to become ready"
            )
        try:
            # A plain TCP check first keeps aiokafka from logging connection errors during boot.
            if not _any_server_accepts(bootstrap_servers):
                raise ConnectionRefusedError(bootstrap_servers)
            seen = kafka_broker_ids(
                bootstrap_servers, timeout=min(5.0, max(1.0, deadline - time.monotonic()))
            )
        except Exception:  # any failure just means "not ready yet"
            seen = set()
        if seen and (expected_ids is None or expected_ids <= seen):
            return
        if time.monotonic() >= deadline:
            missing = (
                "any broker" if expected_ids is None else f"brokers {sorted(expected_ids - seen)}"
            )
            raise TimeoutError(
                f"{missing} not in metadata from {bootstrap_servers} within {timeout:.0f} s"
            )
        time.sleep(0.5)


def signal_process_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send ``sig`` to the process group led by ``process`` (spawned with a new session)."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def stop_process_groups(
    processes: Iterable[subprocess.Popen[bytes]],
    grace: float,
    stop_signal: signal.Signals = signal.SIGTERM,
) -> None:
    """Send ``stop_signal`` to every process group at once, wait up to ``grace`` seconds in total,
    then SIGKILL whatever is left. Returns only when every process has been reaped."""
    processes = list(processes)
    for process in processes:
        signal_process_group(process, stop_signal)
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            logger.warning(
                "process %d ignored %s for %.0f s; killing it", process.pid, stop_signal.name, grace
            )
            signal_process_group(process, signal.SIGKILL)
            process.wait()
