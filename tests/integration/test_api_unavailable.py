"""Kafka or PostgreSQL unreachable: the API starts anyway, answers 503 quickly with a clear
message, never hangs, and recovers by itself when the server is back.

"Unreachable" is a real closed port; "back" is a real TCP relay to the real server opening on
that port, so the app's own clients see a server go away and return.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import psycopg
import pytest

from api.tokens import TOKEN_PREFIX, sign
from kairos.floor.db import connect
from schemas.api import Role
from tests.integration.test_api import (
    T0,
    P,
    api_settings,
    bearer,
    closed_port,
    insert_host,
    prepare,
    running_api,
)

pytestmark = pytest.mark.integration


class TcpRelay:
    """Forwards a local port to a real server while open; refuses connections while closed."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = closed_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()
            self._server = None

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, upstream_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
        self._writers -= {writer, upstream_writer}


def _with_port(dsn: str, port: int) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info.update(host="127.0.0.1", port=str(port))
    return psycopg.conninfo.make_conninfo(**info)


async def _timed(call) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    response = await call
    return time.monotonic() - started, response


async def test_postgres_unreachable_answers_503_fast_and_health_still_answers(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> None:
    port = closed_port()
    settings = api_settings(
        bootstrap_servers, postgres_server, broker_kind, connect_timeout_seconds=1.0
    )
    settings = settings.model_copy(update={"database_url": _with_port(settings.database_url, port)})
    # Well signed, so it must be looked up; a made-up token is refused without the database.
    signed = sign(TOKEN_PREFIX + "never-stored", settings.token_secret.get_secret_value())
    async with running_api(settings) as client:
        made_up = await client.get(f"{P}/status", headers=bearer("any-token"))
        assert made_up.status_code == 401
        for method, path, body in [
            ("GET", f"{P}/status", None),
            ("GET", f"{P}/hosts/h-1", None),
            ("PUT", f"{P}/config", {"interval_low": 60}),
            ("POST", f"{P}/hosts/h-1/force-scan", None),
        ]:
            took, response = await _timed(
                client.request(method, path, json=body, headers=bearer(signed))
            )
            assert response.status_code == 503, response.text
            detail = response.json()["detail"]
            assert "PostgreSQL is not reachable" in detail and f":{port}/" in detail
            assert response.headers["retry-after"] == "5"
            assert took < 3.0, f"{method} {path} took {took:.1f}s"
        assert (await client.get("/healthz")).status_code == 200
        took, ready = await _timed(client.get("/readyz"))
        assert ready.status_code == 503 and took < 3.0
        assert "PostgreSQL" in ready.json()["database"]
        assert ready.json()["detail"].startswith("not ready; ")
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200 and "kairos_read_model_up 0" in metrics.text


async def test_kafka_unreachable_writes_answer_503_reads_still_work(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> None:
    settings = api_settings(bootstrap_servers, postgres_server, broker_kind)
    tokens = await prepare(settings)
    async with await connect(settings.database_url) as conn:
        await insert_host(conn, "web-1", T0)
        await conn.commit()
    port = closed_port()
    down = settings.model_copy(update={"kafka_bootstrap_servers": f"127.0.0.1:{port}"})
    admin = bearer(tokens[Role.SUPER_ADMIN])
    async with running_api(down) as client:
        assert (await client.get(f"{P}/hosts/web-1", headers=admin)).status_code == 200
        for method, path, body in [
            ("PUT", f"{P}/config", {"interval_low": 60}),
            ("POST", f"{P}/toggle?enabled=false", None),
            ("POST", f"{P}/initialize", None),
            ("PUT", f"{P}/hosts/web-1/maintenance", {"enabled": True}),
            ("POST", f"{P}/hosts/web-1/force-scan", None),
        ]:
            took, response = await _timed(client.request(method, path, json=body, headers=admin))
            assert response.status_code == 503, response.text
            assert f"Kafka at 127.0.0.1:{port} is not reachable" in response.json()["detail"]
            assert took < 6.0, f"{method} {path} took {took:.1f}s"
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["database"] == "ok" and "Kafka" in ready.json()["kafka"]


async def test_api_started_while_postgres_was_down_serves_once_it_is_back(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> None:
    settings = api_settings(bootstrap_servers, postgres_server, broker_kind)
    tokens = await prepare(settings)
    info = psycopg.conninfo.conninfo_to_dict(settings.database_url)
    relay = TcpRelay(info.get("host", "127.0.0.1"), int(info.get("port", 5432)))
    through_relay = settings.model_copy(
        update={
            "database_url": _with_port(settings.database_url, relay.port),
            "connect_timeout_seconds": 1.0,
        }
    )
    guest = bearer(tokens[Role.GUEST])
    async with running_api(through_relay) as client:
        assert (await client.get(f"{P}/status", headers=guest)).status_code == 503
        await relay.open()
        try:
            started = time.monotonic()
            while (await client.get(f"{P}/status", headers=guest)).status_code != 200:
                assert time.monotonic() - started < 20, "the API did not recover"
                await asyncio.sleep(0.2)
            await relay.close()
            response = await client.get(f"{P}/status", headers=guest)
            assert response.status_code == 503
            await relay.open()
            started = time.monotonic()
            while (await client.get(f"{P}/status", headers=guest)).status_code != 200:
                assert time.monotonic() - started < 20, "the API did not recover twice"
                await asyncio.sleep(0.2)
        finally:
            await relay.close()


async def test_kafka_that_comes_up_after_the_api_is_used_without_restart(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> None:
    """Only the bootstrap goes through the relay; the broker then answers on its own port."""
    settings = api_settings(bootstrap_servers, postgres_server, broker_kind)
    tokens = await prepare(settings)
    host, port = bootstrap_servers.split(",")[0].rsplit(":", 1)
    relay = TcpRelay(host, int(port))
    late = settings.model_copy(update={"kafka_bootstrap_servers": f"127.0.0.1:{relay.port}"})
    admin = bearer(tokens[Role.SECURITY_ADMIN])
    async with running_api(late) as client:
        before = await client.post(f"{P}/initialize", headers=admin)
        assert before.status_code == 503
        await relay.open()
        try:
            after = await client.post(f"{P}/initialize", headers=admin)
            assert after.status_code == 202, after.text
            assert (await client.get("/readyz")).status_code == 200
        finally:
            await relay.close()
