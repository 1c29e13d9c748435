"""The projector's `matched` flag on results, against a real PostgreSQL read model."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from kairos.floor.db import connect, migrate
from schemas.commands import ScanCommand
from streams.projection.writer import apply
from tests.support.factories import scan_command, scan_result
from tests.support.stack import unique_name

pytestmark = pytest.mark.integration

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def command(command_id: str) -> ScanCommand:
    return scan_command(command_id, issued_at=T0)


async def test_result_is_unmatched_until_its_command_is_projected(
    postgres_server: Callable[[str], str],
) -> None:
    dsn = postgres_server(unique_name("kairos_unmatched_"))
    await migrate(dsn)
    known = scan_result({"command_id": "cmd-known", "host_id": "h-1"})
    early = scan_result({"command_id": "cmd-late", "host_id": "h-1"})
    stray = scan_result({"command_id": "cmd-never", "host_id": "h-1"})
    async with await connect(dsn) as conn:
        await apply([command("cmd-known")], conn)
        await apply([known, early, stray], conn)
        before = dict(
            await (await conn.execute("SELECT command_id, matched FROM scan_results")).fetchall()
        )
        await apply([command("cmd-late")], conn)
        after = dict(
            await (await conn.execute("SELECT command_id, matched FROM scan_results")).fetchall()
        )
    assert before == {"cmd-known": True, "cmd-late": False, "cmd-never": False}
    assert after == {"cmd-known": True, "cmd-late": True, "cmd-never": False}
