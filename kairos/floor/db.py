"""PostgreSQL at the edges: one clear error when it is unreachable, and schema migrations."""

from __future__ import annotations

import logging
from importlib import resources

import psycopg
import psycopg.sql

log = logging.getLogger(__name__)

MIGRATIONS_PACKAGE = "kairos.floor.migrations"


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


RENAMED_MIGRATIONS: dict[str, str] = {"020_token_expiry.sql": "007_token_expiry.sql"}
"""Migrations renamed after release, with the name a database may have recorded them under.

Two migrations once shared the number 007; the token expiry moved to 020 (014-019 were taken).
A database that applied it under its old name records the new name instead of applying it again.
"""


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
                if RENAMED_MIGRATIONS.get(name) in done:
                    await conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (name,))
                    continue
                await conn.execute(sql.encode())
                await conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (name,))
                applied.append(name)
    if applied:
        log.info("applied migrations: %s", ", ".join(applied))
    return applied


KEPT_ON_REBIND = frozenset({"schema_migrations", "api_tokens", "event_store"})
"""Tables that are not projections of the event store: a new event store keeps them."""


async def bind_event_store(
    dsn: str, *, cluster_id: str, bootstrap_servers: str, timeout: float = 10.0
) -> bool:
    """Record which Kafka cluster this read model projects; True if it had to be cleared.

    A read model built from another cluster (the broker was replaced or reset) would show
    hosts the new event store does not have, so its projected tables are emptied: the
    projector's consumer group is new on that cluster and rebuilds them from the start.
    """
    async with await connect(dsn, timeout=timeout) as conn:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(727275)")
            cursor = await conn.execute("SELECT cluster_id FROM event_store")
            row = await cursor.fetchone()
            if row is not None and row[0] == cluster_id:
                return False
            cleared = False
            if row is not None:
                cursor = await conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                )
                tables = sorted(
                    name for (name,) in await cursor.fetchall() if name not in KEPT_ON_REBIND
                )
                if tables:
                    names = psycopg.sql.SQL(", ").join(psycopg.sql.Identifier(t) for t in tables)
                    await conn.execute(psycopg.sql.SQL("TRUNCATE {}").format(names))
                cleared = True
                log.warning(
                    "the read model projected Kafka cluster %s, now %s: cleared it to rebuild",
                    row[0],
                    cluster_id,
                )
            await conn.execute(
                "INSERT INTO event_store (singleton, cluster_id, bootstrap_servers)"
                " VALUES (true, %s, %s) ON CONFLICT (singleton) DO UPDATE SET"
                " cluster_id = EXCLUDED.cluster_id,"
                " bootstrap_servers = EXCLUDED.bootstrap_servers, bound_at = now()",
                (cluster_id, bootstrap_servers),
            )
    return cleared
