"""The operator's controls hold for work already queued, on a real broker, with the cap
saturated: one slot, taken by a command nobody answers, and claims waiting behind it.

Maintenance, down, inactive and deletion withdraw a waiting claim; turning the scheduler off
holds the queue. None of the held hosts is commanded while held, and every one is commanded
once released (a deleted host never)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kairos.floor.settings import Settings
from kairos.localstack.ports import free_port
from schemas.base import WithdrawReason
from tests.support.factories import (
    host_created,
    host_deleted,
    host_updated,
    maintenance_set,
    scan_result,
)
from tests.support.kafka import (
    Collector,
    configure,
    hosts_changelog,
    publish,
    start_producer,
    wait_until,
)
from tests.support.metrics import sample

pytestmark = pytest.mark.integration

HELD = {
    "held-maintenance": WithdrawReason.MAINTENANCE,
    "held-down": WithdrawReason.DOWN,
    "held-inactive": WithdrawReason.INACTIVE,
}


def _metric(settings: Settings, name: str) -> float:
    value = sample(settings, name)
    assert value is not None, f"{name} not exposed"
    return value


async def test_controls_hold_claims_waiting_behind_a_saturated_cap(
    make_settings: Any, workers: Any
) -> None:
    settings: Settings = make_settings(metrics_port=free_port())
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    await configure(settings, producer, max_concurrent_scans=1, initial_spread_seconds=0)
    async with Collector(settings, names.scan_commands, hosts_changelog(settings)) as seen:

        def commands(host_id: str | None = None) -> list[dict[str, Any]]:
            return [c for c in seen.values(names.scan_commands) if host_id in (None, c["host_id"])]

        def latest(host_id: str) -> Any:
            states = seen.host_states(settings, host_id)
            return states[-1] if states else None

        # The cap is saturated: the blocker holds the only slot, and is not answered yet.
        await publish(producer, names.object_created, "blocker", host_created("blocker"))
        await wait_until(lambda: commands("blocker"), timeout=30, what="the blocker's command")
        waiting = [*HELD, "deleted-while-waiting", "kept"]
        for host_id in waiting:
            await publish(producer, names.object_created, host_id, host_created(host_id))
        await wait_until(
            lambda: all((s := latest(h)) is not None and s.in_flight for h in waiting),
            timeout=30,
            what="every waiting host claimed",
        )
        first_claims = {h: latest(h).in_flight.command_id for h in HELD}
        assert commands() == commands("blocker")

        await publish(
            producer,
            names.schedule_changes,
            "held-maintenance",
            maintenance_set("held-maintenance", enabled=True),
        )
        await publish(
            producer, names.object_created, "held-down", host_updated("held-down", status="down")
        )
        await publish(
            producer,
            names.object_created,
            "held-inactive",
            host_updated("held-inactive", is_active=False),
        )
        await publish(
            producer,
            names.object_created,
            "deleted-while-waiting",
            host_deleted("deleted-while-waiting"),
        )
        await wait_until(
            lambda: all(
                (s := latest(h)) is not None
                and s.in_flight is None
                and s.last_withdrawn is not None
                and s.last_withdrawn.reason is reason
                for h, reason in HELD.items()
            ),
            timeout=30,
            what="each held host's claim withdrawn, with its reason",
        )
        for host_id, claim in first_claims.items():
            assert latest(host_id).last_withdrawn.command_id == claim

        # Off, with the slot freed: the one claim still waiting is held, not issued.
        await configure(settings, producer, enabled=False)
        blocker = commands("blocker")[0]
        await publish(producer, names.scan_completed, "blocker", scan_result(blocker))
        await wait_until(
            lambda: (
                _metric(settings, "kairos_in_flight") == 0
                and _metric(settings, "kairos_held_commands") == 1
            ),
            timeout=30,
            what="the blocker's slot freed and the kept host's claim held",
        )
        assert commands() == [blocker], "a command was issued while the scheduler was off"

        # On: the held claim is issued.
        await configure(settings, producer, enabled=True)
        await wait_until(lambda: commands("kept"), timeout=30, what="the held claim issued")
        assert _metric(settings, "kairos_held_commands") == 0
        await publish(producer, names.scan_completed, "kept", scan_result(commands("kept")[0]))

        # Released, each held host is claimed again at once and commanded, one at a time.
        await publish(
            producer,
            names.schedule_changes,
            "held-maintenance",
            maintenance_set("held-maintenance", enabled=False),
        )
        await publish(
            producer, names.object_created, "held-down", host_updated("held-down", status="up")
        )
        await publish(
            producer,
            names.object_created,
            "held-inactive",
            host_updated("held-inactive", is_active=True),
        )
        answered: set[str] = set()

        def unanswered() -> list[dict[str, Any]]:
            return [
                c for c in commands() if c["host_id"] in HELD and c["command_id"] not in answered
            ]

        for _ in HELD:  # One slot: each is issued once the one before it is answered.
            await wait_until(unanswered, timeout=30, what="a released host's command")
            for command in unanswered():
                answered.add(command["command_id"])
                await publish(
                    producer, names.scan_completed, command["host_id"], scan_result(command)
                )
        await wait_until(
            lambda: all(latest(h).last_scan_completed is not None for h in HELD),
            timeout=30,
            what="each released host scanned",
        )
    await producer.stop()

    for host_id, claim in first_claims.items():
        [command] = commands(host_id)
        assert command["command_id"] != claim, "a withdrawn claim was issued"
    assert commands("deleted-while-waiting") == []
    assert [c["host_id"] for c in commands()][:2] == ["blocker", "kept"]
    assert len(commands("kept")) == 1 and len(commands("blocker")) == 1
    assert json.dumps(sorted(c["host_id"] for c in commands())) == json.dumps(
        sorted(["blocker", "kept", *HELD])
    )
