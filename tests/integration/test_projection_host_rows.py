"""A host's attributes and labels, as the projector writes them into a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from kairos.floor.db import connect, migrate
from schemas.objects import ObjectAttributes
from schemas.state import HostStateChanged
from streams.projection.writer import apply
from tests.support.factories import host_state_changed
from tests.support.stack import unique_name

pytestmark = pytest.mark.integration

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def changed(host_id: str, version: int, attributes: ObjectAttributes) -> HostStateChanged:
    return host_state_changed(
        host_id,
        version,
        at=T0,
        attributes=attributes,
        created_at=T0,
        updated_at=T0 + timedelta(minutes=version),
    )


async def test_attributes_and_labels_read_back_as_the_worker_held_them(
    postgres_server: Callable[[str], str],
) -> None:
    dsn = postgres_server(unique_name("kairos_host_rows_"))
    await migrate(dsn)
    # Text COPY escapes (backslash, tab, newline), JSON escapes (quote) and text beyond ASCII.
    awkward = ObjectAttributes(
        hostname='db-1\\prod\t"main"',
        os="Ubuntu 24.04 — ünïcode ✓",
        organization="org\nsplit",
        labels={"team": "sécurité", "path": "C:\\scans", "quote": 'say "hi"', "empty": ""},
    )
    plain = ObjectAttributes()
    async with await connect(dsn) as conn:
        await apply([changed("h-awkward", 1, awkward), changed("h-plain", 1, plain)], conn)
        # A newer version replaces the row; its attributes come with it.
        renamed = awkward.model_copy(update={"hostname": "db-1", "labels": {"team": "blue"}})
        await apply([changed("h-awkward", 2, renamed)], conn)
        cursor = await conn.execute(
            "SELECT host_id, hostname, organization, attributes, labels FROM host_schedule"
            " ORDER BY host_id"
        )
        rows = {row[0]: row[1:] for row in await cursor.fetchall()}
    assert rows == {
        "h-awkward": (
            "db-1",
            "org\nsplit",
            renamed.model_dump(mode="json", exclude={"labels"}),
            {"team": "blue"},
        ),
        "h-plain": (None, None, plain.model_dump(mode="json", exclude={"labels"}), {}),
    }
    async with await connect(dsn) as conn:
        await apply([changed("h-first", 1, awkward)], conn)
        cursor = await conn.execute(
            "SELECT hostname, attributes, labels FROM host_schedule WHERE host_id = 'h-first'"
        )
        assert await cursor.fetchone() == (
            awkward.hostname,
            awkward.model_dump(mode="json", exclude={"labels"}),
            awkward.labels,
        )
