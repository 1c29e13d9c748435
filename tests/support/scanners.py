"""Registering scanners for tests that create schedules through the API.

Where a worker runs, register through the API (`put_scanners`): the worker applies the event
and the projector writes the config row. Where only the API runs, nothing applies events, so
`register_scanners` writes the `scheduler_config` row as the projector does (the same upsert,
guarded by the version) with a config that carries the scanners.
"""

from __future__ import annotations

from typing import Any

import httpx
from psycopg.types.json import Jsonb

from kairos.floor.db import connect
from schemas.config import ScannerSpec, SchedulerConfig

SCANNERS = "/api/compliance/scheduler/scanners"

UPSERT_CONFIG = (
    "INSERT INTO scheduler_config (id, config, version, updated_at)"
    " VALUES (true, %s, %s, now())"
    " ON CONFLICT (id) DO UPDATE SET config = excluded.config, version = excluded.version,"
    " updated_at = excluded.updated_at WHERE excluded.version > scheduler_config.version"
)
"""The projector's write of a published config (streams/projection/writer.py)."""


async def register_scanners(database_url: str, *names: str, **fields: Any) -> SchedulerConfig:
    """Add (or replace) an entry per name, with `fields`, to the projected config; returns it."""
    async with await connect(database_url) as conn:
        cursor = await conn.execute("SELECT config, version FROM scheduler_config")
        row = await cursor.fetchone()
        stored = {} if row is None else {**row[0], "version": row[1]}
        config = SchedulerConfig.model_validate(
            {key: value for key, value in stored.items() if key in SchedulerConfig.model_fields}
        )
        kept = [spec for spec in config.scanners if spec.name not in names]
        added = [ScannerSpec(name=name, **fields) for name in names]
        config = config.model_copy(
            update={"scanners": (*kept, *added), "version": config.version + 1}
        )
        await conn.execute(UPSERT_CONFIG, (Jsonb(config.model_dump(mode="json")), config.version))
        await conn.commit()
    return config


async def put_scanners(
    client: httpx.AsyncClient, headers: dict[str, str], *names: str, **fields: Any
) -> None:
    """PUT each scanner with `?wait=true`, and insist the read model shows it (200)."""
    for name in names:
        response = await client.put(
            f"{SCANNERS}/{name}", params={"wait": "true"}, json=fields, headers=headers
        )
        assert response.status_code == 200, (name, response.status_code, response.text)
