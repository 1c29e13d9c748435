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


def incarnation(
    host_id: str, versions: range, *, created_at: datetime, hostname: str
) -> list[HostStateChanged]:
    attributes = ObjectAttributes(hostname=hostname)
    return [
        host_state_changed(
            host_id,
            version,
            at=created_at + timedelta(minutes=version),
            attributes=attributes,
            created_at=created_at,
        )
        for version in versions
    ]


def deleted(host_id: str, version: int, at: datetime) -> HostStateChanged:
    return HostStateChanged(host_id=host_id, version=version, schedule=None, changed_at=at)


def tombstone(host_id: str, at: datetime, created_at: datetime | None) -> HostStateChanged:
    """A deletion as the projector reads it from the hosts changelog: version 0, and the
    creation time of the incarnation it ends where its record says it."""
    return HostStateChanged(
        host_id=host_id, version=0, schedule=None, changed_at=at, deleted_created_at=created_at
    )


async def test_a_host_deleted_and_created_again_reads_as_its_new_incarnation(
    postgres_server: Callable[[str], str],
) -> None:
    """A host created again starts over at version 1; its rows must not wait for the old
    incarnation's version to be passed, whether the deletion came in an earlier batch, in the
    same batch, or never reached the read model."""
    dsn = postgres_server(unique_name("kairos_host_again_"))
    await migrate(dsn)
    later = T0 + timedelta(days=1)
    first = incarnation("h-apart", range(1, 8), created_at=T0, hostname="first")
    second = incarnation("h-apart", range(1, 3), created_at=later, hostname="second")
    one_batch = [
        *incarnation("h-together", range(1, 8), created_at=T0, hostname="first"),
        deleted("h-together", 8, T0 + timedelta(hours=1)),
        *incarnation("h-together", range(1, 3), created_at=later, hostname="second"),
    ]
    async with await connect(dsn) as conn:
        await apply(first, conn)
        await apply([deleted("h-apart", 8, T0 + timedelta(hours=1))], conn)
        await apply(second, conn)
        await apply(one_batch, conn)
        # The deletion never projected (the host's row still live at version 7).
        await apply(incarnation("h-lost", range(1, 8), created_at=T0, hostname="first"), conn)
        await apply(incarnation("h-lost", range(1, 2), created_at=later, hostname="second"), conn)
        # A change of the old incarnation arriving late does not take the row back.
        await apply(first[-1:], conn)
        cursor = await conn.execute(
            "SELECT host_id, hostname, version, deleted, created_at FROM host_schedule"
            " ORDER BY host_id"
        )
        rows = await cursor.fetchall()
        cursor = await conn.execute("SELECT sum(hosts) FROM host_state_counts")
        counted = (await cursor.fetchone() or [None])[0]
    assert rows == [
        ("h-apart", "second", 2, False, later),
        ("h-lost", "second", 1, False, later),
        ("h-together", "second", 2, False, later),
    ]
    assert counted == 3


async def test_a_replayed_tombstone_leaves_the_row_as_the_deletion_left_it_or_as_created_again(
    postgres_server: Callable[[str], str],
) -> None:
    """The projector commits its offsets after its transactions, so a restart reads some
    changelog records again, each batch cut where it falls. A tombstone read again leaves a row
    already deleted as it is, and one of an earlier incarnation, read again alone after the
    host was created again, does not end the new incarnation."""
    dsn = postgres_server(unique_name("kairos_host_replay_"))
    await migrate(dsn)
    later = T0 + timedelta(days=1)
    gone_at, again_at = T0 + timedelta(hours=1), later + timedelta(minutes=5)
    async with await connect(dsn) as conn:
        await apply(incarnation("h-gone", range(1, 4), created_at=T0, hostname="first"), conn)
        await apply([tombstone("h-gone", gone_at, T0)], conn)
        await apply([tombstone("h-gone", gone_at, T0)], conn)

        await apply(incarnation("h-again", range(1, 4), created_at=T0, hostname="first"), conn)
        await apply([tombstone("h-again", gone_at, T0)], conn)
        second = incarnation("h-again", range(1, 3), created_at=later, hostname="second")
        await apply(second, conn)
        await apply([tombstone("h-again", gone_at, T0)], conn)
        await apply(second[:1], conn)
        # A tombstone of the new incarnation still ends it.
        await apply(incarnation("h-ended", range(1, 2), created_at=later, hostname="new"), conn)
        await apply([tombstone("h-ended", again_at, later)], conn)
        cursor = await conn.execute(
            "SELECT host_id, hostname, version, deleted, CASE WHEN deleted THEN updated_at END,"
            " created_at FROM host_schedule ORDER BY host_id"
        )
        rows = await cursor.fetchall()
        cursor = await conn.execute("SELECT sum(hosts) FROM host_state_counts")
        counted = (await cursor.fetchone() or [None])[0]
    assert rows == [
        ("h-again", "second", 2, False, None, later),
        ("h-ended", "new", 2, True, again_at, later),
        ("h-gone", "first", 4, True, gone_at, T0),
    ]
    assert counted == 1
