"""Read-model migrations: each applied once, under a name no other migration shares.

A database upgraded from a release where the token expiry was `007_token_expiry.sql` has it
recorded under that name; the runner must take the renamed `020_token_expiry.sql` as applied.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg

from kairos.floor.db import RENAMED_MIGRATIONS, migrate, migrations
from tests.support.stack import unique_name


def recorded(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM schema_migrations")}


def test_a_fresh_database_applies_every_migration_once(
    postgres_server: Callable[[str], str],
) -> None:
    dsn = postgres_server(unique_name("kairos_"))
    names = [name for name, _ in migrations()]
    assert asyncio.run(migrate(dsn)) == names
    assert asyncio.run(migrate(dsn)) == []
    assert recorded(dsn) == set(names)


def test_a_migration_applied_under_its_old_name_is_not_applied_again(
    postgres_server: Callable[[str], str],
) -> None:
    dsn = postgres_server(unique_name("kairos_"))
    asyncio.run(migrate(dsn))
    # The state a database of the earlier release is in: every migration applied, the
    # renamed ones recorded under their old names.
    with psycopg.connect(dsn) as conn:
        for new, old in RENAMED_MIGRATIONS.items():
            conn.execute("UPDATE schema_migrations SET name = %s WHERE name = %s", (old, new))
    assert asyncio.run(migrate(dsn)) == []
    names = recorded(dsn)
    assert set(RENAMED_MIGRATIONS) <= names
    assert set(RENAMED_MIGRATIONS.values()) <= names
    assert asyncio.run(migrate(dsn)) == []
