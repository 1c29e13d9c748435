"""PostgreSQL at the edges: one clear error when it is unreachable, and schema migrations."""

from __future__ import annotations

import logging
from importlib import resources

import psycopg

log = logging.getLogger(__name__)

MIGRATIONS_PACKAGE = "kairos.migrations"


class DatabaseUnavailable(ConnectionError):
    """PostgreSQL could not be reached; the message names where."""


def redact(dsn: str) -> str:
    """The DSN without its password, for messages."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info.pop("password", None)
    host = info.get("host", "localhost")
    return f"{host}:{info.get('port', 5432)}/{info.get('dbname', '')}"


async def connect(dsn: str, *, timeout: float = 10.0) -> psycopg.AsyncConnection:
    try:
        return await psycopg.AsyncConnection.connect(dsn, connect_timeout=max(1, int(timeout)))
    except psycopg.OperationalError as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise DatabaseUnavailable(
            f"PostgreSQL is not reachable at {redact(dsn)}: {first_line}"
        ) from None


def migrations() -> list[tuple[str, str]]:
    """(name, sql) of every migration, in order."""
    files = resources.files(MIGRATIONS_PACKAGE)
    named = sorted(
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in files.iterdir()
        if entry.name.endswith(".sql")
    )
    return named


async def migrate(dsn: str, *, timeout: float = 10.0) -> list[str]:
    """Apply pending migrations once each (serialised by an advisory lock); return their names."""
    applied: list[str] = []
    async with await connect(dsn, timeout=timeout) as conn:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(727274)")
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cursor = await conn.execute("SELECT name FROM schema_migrations")
            done = {row[0] for row in await cursor.fetchall()}
            for name, sql in migrations():
                if name in done:
                    continue
                await conn.execute(sql.encode())
                await conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (name,))
                applied.append(name)
    if applied:
        log.info("applied migrations: %s", ", ".join(applied))
    return applied
