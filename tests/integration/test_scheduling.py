"""Adaptive scheduling through a real broker, with `kairos worker` processes.

Scheduler time runs 3600x faster than wall time (one hour per second) where a rule
would otherwise take hours to show; the simulated agents stamp results in scheduler time.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kairos.floor.settings import Settings
from schemas.base import CommandReason, ComplianceState
from schemas.internal import DispatchRequested
from schemas.topics import CONFIG_KEY
from streams import codec
from tests.support.agents import ScannerFleet, always
from tests.support.factories import (
    config_updated,
    host_created,
    host_deleted,
    maintenance_set,
    scan_requested,
    scheduler_toggled,
)
from tests.support.kafka import (
    Collector,
    allow_slow_answers,
    configure,
    hosts_changelog,
    publish,
    start_producer,
    wait_until,
)

pytestmark = pytest.mark.integration

HOUR_PER_SECOND = 3600.0


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.fixture
def fast_settings(make_settings) -> Settings:
    return make_settings(clock_speed=HOUR_PER_SECOND, clock_origin=datetime.now(UTC))


async def test_critical_result_schedules_next_scan_one_interval_after_completion(
    fast_settings: Settings, workers
) -> None:
    workers(fast_settings)
    names = fast_settings.topics
    producer = await start_producer(fast_settings)
    await allow_slow_answers(fast_settings, producer)  # A late result is retried, not planned.
    async with ScannerFleet(fast_settings, score_for=always(10)) as fleet:
        await publish(producer, names.object_created, "crit-1", host_created("crit-1"))
        await wait_until(lambda: len(fleet.commands) >= 2, timeout=15, what="a second command")
    await producer.stop()
    first, second = fleet.commands[:2]
    assert first["reason"] == "unknown" and first["priority"] == 10
    assert second["reason"] == "scheduled"
    assert second["state"] == "critical" and second["priority"] == 9
    assert at(second["due_at"]) == at(first["issued_at"]) + timedelta(minutes=60)
    assert at(second["issued_at"]) >= at(second["due_at"])
    assert second["command_id"] != first["command_id"]


async def test_failed_scan_retries_after_retry_delay_with_a_new_attempt(
    fast_settings: Settings, workers
) -> None:
    workers(fast_settings)
    names = fast_settings.topics
    producer = await start_producer(fast_settings)
    async with ScannerFleet(fast_settings, score_for=lambda command: None) as fleet:
        await publish(producer, names.object_created, "flaky-1", host_created("flaky-1"))
        await wait_until(lambda: len(fleet.commands) >= 2, timeout=15, what="a retry")
    await producer.stop()
    first, retry = fleet.commands[:2]
    assert retry["reason"] == "retry"
    assert retry["attempt"] == first["attempt"] + 1 == 2
    assert retry["command_id"] != first["command_id"]
    waited = at(retry["due_at"]) - at(first["issued_at"])
    # The lower bound is the rule; the upper one only catches a retry that was never delayed
    # by much more than the test's own round trips (seconds of wall time, hours here).
    assert timedelta(seconds=300) <= waited < timedelta(hours=6)


async def test_command_without_result_times_out_and_is_retried(
    fast_settings: Settings, workers
) -> None:
    workers(fast_settings)
    names = fast_settings.topics
    producer = await start_producer(fast_settings)
    async with ScannerFleet(fast_settings, answer=lambda command: command["attempt"] > 1) as fleet:
        await publish(producer, names.object_created, "silent-1", host_created("silent-1"))
        await wait_until(
            lambda: len(fleet.commands) >= 2, timeout=20, what="a retry after the deadline"
        )
    await producer.stop()
    first, retry = fleet.commands[:2]
    assert at(first["deadline"]) == at(first["issued_at"]) + timedelta(seconds=600)
    assert retry["reason"] == "retry" and retry["attempt"] == 2
    assert at(retry["due_at"]) >= at(first["deadline"]) + timedelta(seconds=300)


async def test_global_cap_holds_and_frees_a_slot_per_result(settings: Settings, workers) -> None:
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    await configure(settings, producer, max_concurrent_scans=3)
    answered: set[str] = set()
    async with ScannerFleet(
        settings, answer=lambda command: command["host_id"] in answered
    ) as fleet:
        for number in range(8):
            await publish(
                producer, names.object_created, f"cap-{number}", host_created(f"cap-{number}")
            )
        await wait_until(lambda: len(fleet.commands) >= 3, timeout=15, what="three commands")
        await asyncio.sleep(1.0)
        assert len(fleet.commands) == 3, "more than max_concurrent_scans in flight"
        answered.add(fleet.commands[0]["host_id"])
        fleet.answer_later(fleet.commands[0])
        await wait_until(
            lambda: len(fleet.commands) >= 4, timeout=15, what="a fourth command after one result"
        )
        await asyncio.sleep(1.0)
    await producer.stop()
    assert len(fleet.commands) == 4
    assert fleet.max_in_flight == 3


async def test_force_scan_runs_at_once_even_in_maintenance(settings: Settings, workers) -> None:
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    async with ScannerFleet(settings) as fleet:
        await publish(producer, names.object_created, "maint-1", host_created("maint-1"))
        await wait_until(lambda: len(fleet.commands) >= 1, timeout=15, what="the first scan")
        await publish(
            producer, names.schedule_changes, "maint-1", maintenance_set("maint-1", enabled=True)
        )
        await publish(producer, names.schedule_changes, "maint-1", scan_requested("maint-1"))
        await wait_until(lambda: len(fleet.commands) >= 2, timeout=15, what="the forced scan")
    await producer.stop()
    forced = fleet.commands[1]
    assert forced["reason"] == "force" and forced["priority"] == 10


async def test_force_scan_of_an_inactive_or_down_host_is_sent(settings: Settings, workers) -> None:
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    async with ScannerFleet(settings) as fleet:
        await publish(
            producer, names.object_created, "off-2", host_created("off-2", is_active=False)
        )
        await publish(
            producer, names.object_created, "down-2", host_created("down-2", status="down")
        )
        await publish(producer, names.object_created, "probe", host_created("probe"))
        await wait_until(
            lambda: fleet.commands_for("probe"), timeout=15, what="the active host's first scan"
        )
        assert fleet.commands_for("off-2") == [] and fleet.commands_for("down-2") == []
        for host in ("off-2", "down-2"):
            await publish(producer, names.schedule_changes, host, scan_requested(host))
        await wait_until(
            lambda: fleet.commands_for("off-2") and fleet.commands_for("down-2"),
            timeout=15,
            what="both forced scans",
        )
    await producer.stop()
    for host in ("off-2", "down-2"):
        [forced] = fleet.commands_for(host)
        assert forced["reason"] == "force" and forced["priority"] == 10


async def test_force_while_the_command_is_out_scans_again_once_it_ends(
    settings: Settings, workers
) -> None:
    """Hosts are not told that their command went out: a force asks the dispatcher for the
    claimed command at the top, and the dispatcher answers that it went out before the force,
    so the host scans again once it ends. The running command is never sent twice."""
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    async with ScannerFleet(settings, answer=lambda command: False) as fleet:
        await publish(producer, names.object_created, "held-1", host_created("held-1"))
        await wait_until(lambda: fleet.commands_for("held-1"), timeout=15, what="the first scan")
        await publish(producer, names.schedule_changes, "held-1", scan_requested("held-1"))
        await asyncio.sleep(2.0)
        [running] = fleet.commands_for("held-1")
        fleet.answer_later(running)
        await wait_until(
            lambda: len(fleet.commands_for("held-1")) >= 2, timeout=15, what="the forced scan"
        )
    await producer.stop()
    first, forced = fleet.commands_for("held-1")
    assert first["reason"] != "force"
    assert forced["reason"] == "force" and forced["priority"] == 10
    assert forced["command_id"] != first["command_id"]


async def test_a_force_answer_delivered_again_after_the_host_was_created_again_is_ignored(
    settings: Settings, workers
) -> None:
    """The dispatcher's answer to a force names the incarnation that asked. Delivered again
    (as a dispatcher replaying its output after a crash would) once the host was deleted and
    created again under the same id, it does not force a scan of the new host, which never
    asked."""
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    first_life = host_created("reborn-1")
    async with (
        Collector(settings, names.host_signals) as signals,
        ScannerFleet(settings, answer=lambda command: False) as fleet,
    ):
        await publish(producer, names.object_created, "reborn-1", first_life)
        await wait_until(lambda: fleet.commands_for("reborn-1"), timeout=15, what="the first scan")
        await publish(producer, names.schedule_changes, "reborn-1", scan_requested("reborn-1"))

        def answers() -> list[Any]:
            kind = b'"kind":"command.issued_before_force"'
            return [r for r in signals.records if r.value is not None and kind in r.value]

        await signals.wait_for(answers, timeout=15, what="the answer to the force")
        await publish(producer, names.object_created, "reborn-1", host_deleted("reborn-1"))
        await publish(producer, names.object_created, "reborn-1", host_created("reborn-1"))
        await wait_until(
            lambda: len(fleet.commands_for("reborn-1")) >= 2, timeout=15, what="the new host's scan"
        )
        [answer] = answers()
        await producer.send_and_wait(names.host_signals, answer.value, key=answer.key)
        old, new = fleet.commands_for("reborn-1")
        fleet.answer_later(new)
        # A forced scan follows a result at once: a few seconds without one show there is none.
        await asyncio.sleep(3.0)
    await producer.stop()
    told = json.loads(answer.value)
    assert told["command_id"] == old["command_id"]
    assert told["incarnation"] == str(first_life.event_id)
    assert [command["reason"] for command in fleet.commands_for("reborn-1")] == [
        "unknown",
        "unknown",
    ]


async def test_maintenance_holds_scans_until_it_ends_then_the_overdue_host_is_scanned(
    fast_settings: Settings, workers
) -> None:
    workers(fast_settings)
    names = fast_settings.topics
    producer = await start_producer(fast_settings)
    await allow_slow_answers(fast_settings, producer)  # A late result is retried, not planned.
    async with ScannerFleet(fast_settings, score_for=always(10)) as fleet:
        await publish(
            producer, names.schedule_changes, "m-2", maintenance_set("m-2", enabled=True, hours=3)
        )
        await publish(producer, names.object_created, "m-2", host_created("m-2"))
        await wait_until(lambda: len(fleet.commands) >= 1, timeout=15, what="the onboarding scan")
        await publish(
            producer, names.schedule_changes, "m-2", maintenance_set("m-2", enabled=True, hours=3)
        )
        await wait_until(
            lambda: len(fleet.commands) >= 2, timeout=20, what="a scan after maintenance"
        )
    await producer.stop()
    first, after = fleet.commands[:2]
    # Critical hosts are due an hour later, but maintenance holds them for three hours.
    assert at(after["issued_at"]) - at(first["issued_at"]) >= timedelta(hours=3)
    assert after["reason"] == "scheduled"


async def test_short_maintenance_ends_at_its_end_while_the_next_scan_is_a_day_away(
    fast_settings: Settings, workers
) -> None:
    workers(fast_settings)
    names = fast_settings.topics
    producer = await start_producer(fast_settings)
    await allow_slow_answers(fast_settings, producer)  # A late result leaves no compliant host.

    def states() -> list[dict[str, Any]]:
        return [
            stored.model_dump(mode="json")
            for stored in collected.host_states(fast_settings, "short-1")
        ]

    async with (
        Collector(fast_settings, hosts_changelog(fast_settings)) as collected,
        ScannerFleet(fast_settings, score_for=always(100)) as fleet,
    ):
        await publish(producer, names.object_created, "short-1", host_created("short-1"))
        await collected.wait_for(
            lambda: any(s["state"] == "compliant" for s in states()),
            timeout=15,
            what="the host compliant after its first scan",
        )
        await publish(
            producer,
            names.schedule_changes,
            "short-1",
            maintenance_set("short-1", enabled=True, hours=2),
        )
        await collected.wait_for(
            lambda: any(s.get("maintenance_mode") for s in states()),
            timeout=15,
            what="the host in maintenance",
        )
        # Compliant: the next scan is 24 h (24 s) away; maintenance ends after 2 h (2 s).
        await collected.wait_for(
            lambda: not states()[-1].get("maintenance_mode", False),
            timeout=12,
            what="the host out of maintenance",
        )
    await producer.stop()
    held = next(s for s in states() if s.get("maintenance_mode"))
    released = states()[-1]
    assert released["state"] == "compliant"
    assert released.get("maintenance_until") is None
    assert at(released["updated_at"]) >= at(held["maintenance_until"])
    assert at(released["updated_at"]) - at(held["maintenance_until"]) < timedelta(hours=2)
    assert at(released["next_scheduled_scan"]) > at(released["updated_at"]) + timedelta(hours=20)
    assert len(fleet.commands) == 1, "no scan is due when maintenance ends"


async def test_disabled_scheduler_dispatches_nothing_until_enabled(
    settings: Settings, workers
) -> None:
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    await publish(producer, names.schedule_changes, CONFIG_KEY, scheduler_toggled(False))
    async with ScannerFleet(settings) as fleet:
        await asyncio.sleep(2.0)
        await publish(producer, names.object_created, "off-1", host_created("off-1"))
        await asyncio.sleep(2.0)
        assert fleet.commands == []
        await publish(producer, names.schedule_changes, CONFIG_KEY, scheduler_toggled(True))
        await wait_until(lambda: len(fleet.commands) >= 1, timeout=15, what="a scan once enabled")
    await producer.stop()
    assert fleet.commands[0]["host_id"] == "off-1"


async def test_invalid_inputs_go_to_dead_letters_with_the_reason(
    settings: Settings, workers
) -> None:
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    async with Collector(settings, names.dead_letters, names.scan_commands) as collected:
        await publish(producer, names.schedule_changes, CONFIG_KEY, b'{"type": "config.exploded"}')
        await publish(
            producer,
            names.schedule_changes,
            CONFIG_KEY,
            b'{"event_id": "0b7e9c3d-2f41-4a8e-b6d5-91a3c7e4f208", "type": "config.updated",'
            b' "occurred_at": "2026-01-01T00:00:00Z", "changes": {"interval_critical": 5}}',
        )
        await publish(producer, names.scan_completed, "h", b'{"host_id": "h", "status": "maybe"}')
        await publish(producer, names.schedule_changes, "wrong-key", scan_requested("other-host"))
        await publish(producer, names.object_created, "alive", host_created("alive"))
        await collected.wait_for(
            lambda: (
                len(collected.values(names.dead_letters)) >= 4
                and collected.values(names.scan_commands)
            ),
            timeout=15,
            what="four dead letters and the good host's command",
        )
    await producer.stop()
    errors = [letter["error"] for letter in collected.values(names.dead_letters)]
    assert any("config.exploded" in error or "tag" in error for error in errors)
    assert any("interval_critical" in error for error in errors)
    assert any("status" in error for error in errors)
    assert any("must equal the host id" in error for error in errors)


async def test_an_unreadable_message_in_a_dispatch_batch_costs_only_itself(
    settings: Settings, workers
) -> None:
    """A request from a newer worker (an unknown kind, say) is dead-lettered alone; the claim
    beside it in the same record is still issued."""
    workers(settings)
    names = settings.topics
    request = DispatchRequested(
        command_id="batch-good-1",
        host_id="batch-good",
        priority=5,
        due_at=datetime.now(UTC),
        reason=CommandReason.SCHEDULED,
        state=ComplianceState.UNKNOWN,
        attempt=1,
    )
    unknown = b'{"kind":"dispatch.postponed","command_id":"batch-bad-1"}'
    batch = codec.dispatch_batch([unknown, codec.encode(request)])
    producer = await start_producer(settings)
    async with Collector(settings, names.dead_letters, names.scan_commands) as collected:
        await publish(producer, names.dispatch_queue, "dispatch", batch)
        await collected.wait_for(
            lambda: collected.values(names.dead_letters) and collected.values(names.scan_commands),
            timeout=30,
            what="the bad message dead-lettered and the good request issued",
        )
    await producer.stop()
    [letter] = collected.values(names.dead_letters)
    assert letter["error"].startswith("message 0 of a dispatch batch")
    assert "batch-bad-1" in letter["raw"] and "batch-good" not in letter["raw"]
    [command] = collected.values(names.scan_commands)
    assert command["command_id"] == "batch-good-1"


async def test_results_for_a_deleted_host_are_ignored(settings: Settings, workers) -> None:
    worker = workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    async with ScannerFleet(settings, answer=lambda command: False) as fleet:
        await publish(producer, names.object_created, "gone-1", host_created("gone-1"))
        await wait_until(lambda: len(fleet.commands) >= 1, timeout=15, what="a command")
        await publish(producer, names.object_created, "gone-1", host_deleted("gone-1"))
        await asyncio.sleep(1.0)
        fleet.answer_later(fleet.commands[0])
        await publish(producer, names.object_created, "next-1", host_created("next-1"))
        await wait_until(
            lambda: len(fleet.commands) >= 2, timeout=15, what="the next host's command"
        )
    await producer.stop()
    assert [command["host_id"] for command in fleet.commands] == ["gone-1", "next-1"]
    assert worker.process.poll() is None


async def test_a_replayed_input_changes_nothing_in_the_hosts_changelog(
    settings: Settings, workers
) -> None:
    # After a crash an input is handled again. The hosts changelog is the one record of a
    # host's state, the read model's too: the replay, which changes nothing, writes nothing,
    # and the host's next change follows the last version written.
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    created = host_created("again-1")

    def records() -> list[dict[str, Any]]:
        states = collected.host_states(settings, "again-1")
        return [state.model_dump(mode="json") for state in states]

    async with (
        Collector(settings, hosts_changelog(settings)) as collected,
        ScannerFleet(settings, answer=lambda command: False) as fleet,
    ):
        await publish(producer, names.object_created, "again-1", created)
        await wait_until(lambda: len(fleet.commands) >= 1, timeout=15, what="a command")
        command_id = fleet.commands[0]["command_id"]
        await collected.wait_for(
            lambda: any(
                (r.get("in_flight") or {}).get("command_id") == command_id for r in records()
            ),
            timeout=15,
            what="the command in the host's state",
        )
        seen = len(records())
        newest = max(r["version"] for r in records())
        await publish(producer, names.object_created, "again-1", created)
        await publish(
            producer,
            names.schedule_changes,
            "again-1",
            maintenance_set("again-1", enabled=True, hours=2),
        )
        await collected.wait_for(
            lambda: any(r.get("maintenance_mode") for r in records()),
            timeout=15,
            what="the change after the replay",
        )
    await producer.stop()
    after_replay = records()[seen:]
    assert [r["version"] for r in after_replay] == [newest + 1], after_replay
    assert after_replay[0]["maintenance_mode"] is True
    assert len(fleet.commands) == 1  # The replay claimed nothing.


async def test_config_change_replans_scheduled_hosts_from_their_last_completion(
    fast_settings: Settings, workers
) -> None:
    workers(fast_settings)
    names = fast_settings.topics
    producer = await start_producer(fast_settings)
    # Compliant hosts wait a day (24 s here): long enough to change the interval meanwhile.
    async with ScannerFleet(fast_settings, score_for=always(100)) as fleet:
        await publish(producer, names.object_created, "replan-1", host_created("replan-1"))
        await wait_until(lambda: len(fleet.commands) >= 1, timeout=15, what="the first scan")
        await asyncio.sleep(1.0)
        await publish(
            producer, names.schedule_changes, CONFIG_KEY, config_updated(interval_compliant=120)
        )
        await wait_until(lambda: len(fleet.commands) >= 2, timeout=15, what="the re-planned scan")
    await producer.stop()
    first, replanned = fleet.commands[:2]
    assert replanned["state"] == "compliant" and replanned["reason"] == "scheduled"
    assert at(replanned["due_at"]) == at(first["issued_at"]) + timedelta(minutes=120)


async def test_new_hosts_first_scans_spread_over_the_initial_window(make_settings, workers) -> None:
    # One scheduler minute per second: a ten-minute window takes ten seconds.
    settings = make_settings(clock_speed=60.0, clock_origin=datetime.now(UTC))
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    window = timedelta(minutes=10)
    await publish(
        producer,
        names.schedule_changes,
        CONFIG_KEY,
        config_updated(initial_spread_seconds=int(window.total_seconds())),
    )
    await asyncio.sleep(1.0)
    hosts = [f"bulk-{n:02d}" for n in range(40)]
    async with ScannerFleet(settings) as fleet:
        for host in hosts:
            await producer.send(
                names.object_created,
                host_created(host).model_dump_json().encode(),
                key=host.encode(),
            )
        await producer.flush()
        await wait_until(
            lambda: {c["host_id"] for c in fleet.commands} >= set(hosts),
            timeout=30,
            what="every bulk-imported host scanned once",
        )
    await producer.stop()
    firsts: dict[str, datetime] = {}
    for command in fleet.commands:
        firsts.setdefault(command["host_id"], at(command["due_at"]))
    earliest, latest = min(firsts.values()), max(firsts.values())
    assert latest - earliest > window / 2, "first scans were not spread"
    # The hosts arrived within a second or so of wall time, a minute or so of scheduler time.
    assert latest - earliest <= window + timedelta(minutes=2)


async def test_a_hosts_changes_handled_together_reach_its_changelog_in_order(
    settings: Settings, workers
) -> None:
    # A pass hands the host stage's records to the producer as one batch per partition at its
    # end: a host changed many times in one fetch must still come out version after version
    # in its changelog, what a restarted worker recovers from and the read model follows.
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)

    def versions() -> list[int]:
        return [state.version for state in collected.host_states(settings, "order-1")]

    async with Collector(settings, hosts_changelog(settings)) as collected:
        await publish(producer, names.object_created, "order-1", host_created("order-1"))
        await collected.wait_for(lambda: bool(versions()), timeout=15, what="the host")
        for turn in range(12):
            change = maintenance_set("order-1", enabled=turn % 2 == 0, hours=2)
            await producer.send(
                names.schedule_changes, change.model_dump_json().encode(), key=b"order-1"
            )
        await producer.flush()
        await collected.wait_for(
            lambda: len(versions()) >= 13, timeout=20, what="every change in the changelog"
        )
    await producer.stop()
    stored = versions()
    assert stored == sorted(set(stored)), stored
    assert stored[-1] - stored[0] == len(stored) - 1, stored
