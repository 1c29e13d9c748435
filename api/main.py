"""FastAPI application factory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiokafka import AIOKafkaProducer
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from kairos.db import DatabaseUnavailable, connect
from kairos.settings import Settings
from schemas.api import HealthPublic, ReadinessPublic


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.settings = settings
        yield

    app = FastAPI(title="Kairos", version="0.1.0", lifespan=lifespan)

    @app.get("/healthz", response_model=HealthPublic, tags=["health"])
    async def healthz() -> HealthPublic:
        return HealthPublic(status="ok")

    @app.get("/readyz", response_model=ReadinessPublic, tags=["health"])
    async def readyz() -> JSONResponse:
        kafka, database = await asyncio.gather(_kafka_status(settings), _database_status(settings))
        ready = kafka == "ok" and database == "ok"
        body = ReadinessPublic(
            status="ready" if ready else "unavailable", kafka=kafka, database=database
        )
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

    return app


async def _kafka_status(settings: Settings) -> str:
    producer = AIOKafkaProducer(
        **settings.kafka_client_options(), request_timeout_ms=3000, metadata_max_age_ms=3000
    )
    try:
        await asyncio.wait_for(producer.start(), 5)
        return "ok"
    except Exception as error:  # noqa: BLE001 - any failure means "not ready", said in words
        return f"unreachable at {settings.kafka_bootstrap_servers}: {type(error).__name__}"
    finally:
        try:
            await producer.stop()
        except Exception:  # noqa: BLE001
            pass


async def _database_status(settings: Settings) -> str:
    try:
        async with await connect(settings.database_url, timeout=3) as conn:
            await conn.execute("SELECT 1")
        return "ok"
    except DatabaseUnavailable as error:
        return str(error)
