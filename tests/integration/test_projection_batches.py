"""Results and commands applied a batch at a time, against a real PostgreSQL read model: a
batch reads as its records would have one by one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from kairos.floor.db import connect, migrate
from schemas.results import ScanCompleted
from streams.projection.writer import apply
from tests.support.factories import scan_command, scan_result
from tests.support.stack import unique_name

pytestmark = pytest.mark.integration

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def result(command_id: str, *, succeeded: bool, at: datetime) -> ScanCompleted:
    found = scan_result({"command_id": command_id, "host_id": "h-1"}, succeeded=succeeded)
    return found.model_copy(update={"started_at": at, "completed_at": at})


async def test_the_first_result_of_a_batch_decides_its_commands_outcome(
    postgres_server: Callable[[str], str],
) -> None:
    dsn = postgres_server(unique_name("kairos_batch_outcome_"))
    await migrate(dsn)
    first = result("cmd-1", succeeded=True, at=T0 + timedelta(minutes=1))
    second = result("cmd-1", succeeded=False, at=T0 + timedelta(minutes=2))
    later = result("cmd-2", succeeded=False, at=T0 + timedelta(minutes=3))
    async with await connect(dsn) as conn:
        await apply([scan_command("cmd-1", issued_at=T0), first, second], conn)
        await apply([scan_command("cmd-2", issued_at=T0), later], conn)
        # A result for a command whose outcome is known leaves it as it is.
        await apply([result("cmd-2", succeeded=True, at=T0 + timedelta(minutes=4))], conn)
        cursor = await conn.execute(
            "SELECT command_id, outcome, outcome_at FROM scan_commands ORDER BY command_id"
        )
        outcomes = await cursor.fetchall()
        cursor = await conn.execute("SELECT count(*) FROM scan_results WHERE matched")
        matched = await cursor.fetchone()
    assert outcomes == [
        ("cmd-1", "completed", first.completed_at),
        ("cmd-2", "failed", later.completed_at),
    ]
    assert matched == (4,)


async def test_a_result_read_again_keeps_its_first_row(
    postgres_server: Callable[[str], str],
) -> None:
    dsn = postgres_server(unique_name("kairos_batch_replay_"))
    await migrate(dsn)
    once = result("cmd-1", succeeded=False, at=T0)
    # The same event, its text awkward for COPY, and a copy of it differing in its error.
    awkward = once.model_copy(update={"error": 'tab\there, newline\nthere, "quoted" \\ ünï'})
    altered = awkward.model_copy(update={"error": "not the first"})
    async with await connect(dsn) as conn:
        await apply([awkward, altered], conn)
        await apply([altered, scan_command("cmd-1", issued_at=T0)], conn)
        cursor = await conn.execute("SELECT event_id, error, status, matched FROM scan_results")
        rows = await cursor.fetchall()
        cursor = await conn.execute("SELECT command_id, host_id, outcome FROM scan_commands")
        commands = await cursor.fetchall()
    assert rows == [(once.event_id, awkward.error, "failed", True)]
    assert commands == [("cmd-1", "h-1", "failed")]


async def test_a_command_published_twice_keeps_its_first_row(
    postgres_server: Callable[[str], str],
) -> None:
    dsn = postgres_server(unique_name("kairos_batch_commands_"))
    await migrate(dsn)
    issued = scan_command("cmd-1", issued_at=T0)
    again = issued.model_copy(update={"attempt": 2, "issued_at": T0 + timedelta(minutes=1)})
    async with await connect(dsn) as conn:
        await apply([issued, again], conn)
        await apply([again], conn)
        cursor = await conn.execute("SELECT attempt, issued_at FROM scan_commands")
        rows = await cursor.fetchall()
    assert rows == [(1, T0)]
