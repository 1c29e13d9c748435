"""The API under hostile input, against a real broker and a real PostgreSQL read model:
callers without a valid token cost no database work, bodies are bounded, tokens expire and
/metrics labels stay bounded.

"No database work" is counted where every SQL statement of the API starts: checkouts from
its connection pool (psycopg_pool's `requests_num`), and the token verifier's lookups.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
import pytest_asyncio
import uvicorn
from fastapi import FastAPI

from api.deps import Runtime
from api.main import create_app
from api.tokens import TOKEN_PREFIX, issue_token, sign
from kairos.floor.clock import FrozenClock
from kairos.floor.db import connect
from kairos.floor.settings import Settings
from kairos.localstack.ports import free_port
from schemas.api import Role
from tests.integration.test_api import T0, P, api_settings, bearer, prepare, secret_of, seed

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


@dataclass
class Base:
    settings: Settings
    tokens: dict[Role, str]


@pytest_asyncio.fixture(scope="module")
async def base(
    bootstrap_servers: str, postgres_server: Callable[[str], str], broker_kind: str
) -> Base:
    settings = api_settings(bootstrap_servers, postgres_server, broker_kind)
    tokens = await prepare(settings)
    async with await connect(settings.database_url) as conn:
        await seed(conn)
    return Base(settings, tokens)


@dataclass
class Api:
    app: FastAPI
    client: httpx.AsyncClient

    @property
    def runtime(self) -> Runtime:
        runtime: Runtime = self.app.state.runtime
        return runtime

    def checkouts(self) -> int:
        """Connections handed out by the pool so far."""
        return int(self.runtime.pool.get_stats().get("requests_num", 0))


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Api]:
    app = create_app(settings, clock=FrozenClock(T0), wait_seconds=0.0)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kairos") as client:
            yield Api(app, client)


async def test_requests_without_a_valid_token_cost_no_database_work(base: Base) -> None:
    valid = base.tokens[Role.SUPER_ADMIN]
    tampered = valid[:-2] + ("AA" if not valid.endswith("AA") else "BB")
    headers: list[dict[str, str]] = [
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
        bearer("not-a-kairos-token"),
        bearer(TOKEN_PREFIX + "x" * 43),  # the shape of an unsigned token
        bearer(sign(TOKEN_PREFIX + "A" * 43, "another deployment's secret")),
        bearer(tampered),
        bearer(valid + "x" * 500),
    ]
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", f"{P}/hosts", {}),
        ("GET", f"{P}/hosts/h-001", {}),
        ("GET", f"{P}/dead-letters", {}),
        ("PUT", f"{P}/config", {"json": {"interval_critical": 60}}),
        ("PUT", f"{P}/config", {"content": b"{not json"}),
        ("POST", f"{P}/hosts/h-001/force-scan", {}),
        ("PUT", f"{P}/hosts/h-001/maintenance", {"content": b"x" * (2 * MIB)}),
        ("GET", "/api/scheduled-jobs", {}),
    ]
    async with running(base.settings) as api:
        # One real call first, so the pool is open and the valid token is in the cache.
        assert (await api.client.get(f"{P}/status", headers=bearer(valid))).status_code == 200
        checkouts, lookups = api.checkouts(), api.runtime.token_verifier.lookups
        answered = 0
        for header in headers:
            for method, path, options in requests:
                json_type = {"Content-Type": "application/json"} if "content" in options else {}
                response = await api.client.request(
                    method, path, headers={**header, **json_type}, **options
                )
                # 401 (not 422 for the broken JSON, nor 413 for the 2 MiB body): the token is
                # checked before the body is read.
                assert response.status_code == 401, (header, method, path, response.text)
                assert response.headers["www-authenticate"] == "Bearer"
                answered += 1
        assert answered == len(headers) * len(requests)
        assert api.checkouts() == checkouts
        assert api.runtime.token_verifier.lookups == lookups


async def test_a_valid_token_is_looked_up_once_per_cache_time(base: Base) -> None:
    async with await connect(base.settings.database_url) as conn:
        issued = await issue_token(
            conn, role=Role.GUEST, name="cached", secret=secret_of(base.settings)
        )
    async with running(base.settings) as api:
        first = api.checkouts()
        assert (await api.client.get(f"{P}/status", headers=bearer(issued.token))).is_success
        second = api.checkouts()
        assert (await api.client.get(f"{P}/status", headers=bearer(issued.token))).is_success
        third = api.checkouts()
        assert api.runtime.token_verifier.lookups == 1
        # The route's own query is the same both times; the first call also looked the token up.
        assert (second - first) - (third - second) == 1


async def test_an_expired_token_is_refused_with_401(base: Base) -> None:
    async with await connect(base.settings.database_url) as conn:
        issued = await issue_token(
            conn,
            role=Role.SUPER_ADMIN,
            name="one-second",
            secret=secret_of(base.settings),
            ttl=timedelta(seconds=1),
        )
    assert issued.expires_at is not None
    async with running(base.settings) as api:
        response = await api.client.get(f"{P}/status", headers=bearer(issued.token))
        assert response.status_code == 200
        await asyncio.sleep(1.2)
        response = await api.client.get(f"{P}/status", headers=bearer(issued.token))
        assert response.status_code == 401
        assert response.json()["detail"].startswith("the bearer token expired at ")
        assert api.runtime.token_verifier.lookups == 1, "refused from the cache, by its expiry"


async def test_body_over_the_limit_is_413_declared_or_chunked(base: Base) -> None:
    """Default limit (1 MiB): a declared Content-Length over it, and a chunked body with no
    Content-Length that grows past it, are both refused; a body at the limit is read."""
    auth = {**bearer(base.tokens[Role.SUPER_ADMIN]), "Content-Type": "application/json"}
    filler = b'{"interval_critical": 60, "x": "'
    at_limit = filler + b"y" * (MIB - len(filler) - 2) + b'"}'
    assert len(at_limit) == MIB

    def chunks(total: int) -> Callable[[], AsyncIterator[bytes]]:
        async def generate() -> AsyncIterator[bytes]:
            sent = 0
            while sent < total:
                piece = min(64 * 1024, total - sent)
                sent += piece
                yield b" " * piece

        return generate

    async with running(base.settings) as api:
        declared = await api.client.put(f"{P}/config", headers=auth, content=at_limit + b" ")
        assert declared.status_code == 413
        assert "1048576 bytes" in declared.json()["detail"]
        chunked = await api.client.put(f"{P}/config", headers=auth, content=chunks(MIB + 1)())
        assert chunked.status_code == 413
        # At the limit the body is read and judged: an unknown field is a 422.
        assert (
            await api.client.put(f"{P}/config", headers=auth, content=at_limit)
        ).status_code == 422
        metrics = (await api.client.get("/metrics")).text
    assert f'method="PUT",route="{P}/config",status="413"' in metrics


async def test_chunked_body_over_the_limit_is_413_over_a_real_socket(base: Base) -> None:
    """Through uvicorn, as `kairos api` serves: Transfer-Encoding chunked, no Content-Length."""
    settings = base.settings.model_copy(update={"api_max_body_bytes": 4096})
    app = create_app(settings, clock=FrozenClock(T0), wait_seconds=0.0)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve())
    try:
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.05)
        assert server.started

        async def body(total: int) -> AsyncIterator[bytes]:
            for _ in range(total // 1024):
                yield b" " * 1024

        headers = {**bearer(base.tokens[Role.SUPER_ADMIN]), "Content-Type": "application/json"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            request = client.build_request(
                "PUT", f"{P}/config", headers=headers, content=body(8192)
            )
            assert request.headers["transfer-encoding"] == "chunked"
            assert "content-length" not in request.headers
            response = await client.send(request)
            assert response.status_code == 413
            assert "4096 bytes" in response.json()["detail"]
            small = await client.put(f"{P}/config", headers=headers, content=body(2048))
            assert small.status_code == 422  # read in full, and judged: blanks are not JSON
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 15)


async def test_metrics_labels_stay_bounded(base: Base) -> None:
    auth = bearer(base.tokens[Role.GUEST])
    async with running(base.settings) as api:
        for number in range(30):
            await api.client.get(f"{P}/hosts/h-{number:03d}", headers=auth)
            await api.client.get(f"/scan/{number}/../etc/passwd")
            await api.client.request(f"X{number}", f"{P}/hosts/h-{number:03d}", headers=auth)
        text = (await api.client.get("/metrics")).text
    series = [line for line in text.splitlines() if line.startswith("kairos_api_requests_total{")]
    methods = {line.split('method="')[1].split('"')[0] for line in series}
    routes = {line.split('route="')[1].split('"')[0] for line in series}
    assert methods == {"GET", "OTHER"}
    assert routes == {f"{P}/hosts/{{host_id}}", "unmatched"}
    assert "h-007" not in text and "passwd" not in text


async def test_open_endpoints_probe_the_database_at_most_once_a_second(base: Base) -> None:
    """/readyz and /metrics take no token: a flood of them, sequential and concurrent, makes
    at most one database probe each per second (and one forecast a minute)."""
    async with running(base.settings) as api:
        assert (await api.client.get("/readyz")).status_code == 200
        checkouts = api.checkouts()
        started = asyncio.get_running_loop().time()
        for _ in range(5):
            answers = await asyncio.gather(
                *(api.client.get(path) for _ in range(20) for path in ("/readyz", "/metrics"))
            )
            assert {answer.status_code for answer in answers} == {200}
        seconds = asyncio.get_running_loop().time() - started
        probes = api.checkouts() - checkouts
        assert len(answers) * 5 == 200
        assert probes <= 2 * (int(seconds) + 1) + 1, (probes, seconds)
        assert "kairos_read_model_up 1" in answers[-1].text
