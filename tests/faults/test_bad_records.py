"""Records the worker cannot take: each goes to dead-letters with its reason, the rest flows on.

- Inputs near Kafka's 1 MiB message limit, and inputs whose derived records (labels copied into
  host state, args copied into every command) would pass it: refused by the contract's size
  limits before anything is derived, so no send can crash the runtime.
- A state record the worker cannot read at recovery (garbage, or a newer schema with a field it
  does not know): dead-lettered with its key; every other host is still rebuilt and scanned.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from kairos.floor.settings import Settings
from schemas.topics import CONFIG_KEY
from tests.faults.conftest import FaultFigures
from tests.support.agents import ScannerFleet, always
from tests.support.factories import config_updated, host_created, schedule_upserted
from tests.support.kafka import Collector, start_producer, wait_until
from tests.support.stack import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("apache_only")]

NEAR_LIMIT_BYTES = 1_000_000
HOSTS = 20
TEN_MINUTES_PER_SECOND = 600.0


def _alive(worker: WorkerProcess) -> bool:
    return worker.process.poll() is None


async def test_oversized_inputs_are_dead_lettered_and_the_worker_keeps_scheduling(
    settings: Settings, workers, fault_figures: FaultFigures
) -> None:
    names = settings.topics
    worker = workers(settings)
    producer = await start_producer(settings, max_request_size=2 * NEAR_LIMIT_BYTES)
    letters = Collector(settings, names.dead_letters)
    try:
        async with ScannerFleet(settings) as fleet, letters:
            near_limit = host_created("huge-hostname").model_dump(mode="json")
            near_limit["attributes"]["hostname"] = "h" * (NEAR_LIMIT_BYTES - 1_000)
            # Built past the contract's limits on purpose, as a foreign producer might send them.
            many_labels = host_created("many-labels").model_dump(mode="json")
            many_labels["attributes"]["labels"] = {f"label-{n}": "v" * 1000 for n in range(200)}
            big_args = schedule_upserted("big-args").model_dump(mode="json")
            big_args["schedule"]["args"] = {"blob": "a" * 200_000}
            oversized = [
                (names.object_created, "huge-hostname", json.dumps(near_limit).encode()),
                (names.object_created, "many-labels", json.dumps(many_labels).encode()),
                (names.schedule_changes, "big-args", json.dumps(big_args).encode()),
            ]
            for topic, key, value in oversized:
                await producer.send_and_wait(topic, value, key=key.encode())
            await producer.send_and_wait(
                names.object_created,
                host_created("ordinary").model_dump_json().encode(),
                key=b"ordinary",
            )
            await wait_until(
                lambda: fleet.commands_for("ordinary"), timeout=60, what="the ordinary host's scan"
            )
            await wait_until(
                lambda: len(letters.values(names.dead_letters)) >= len(oversized),
                timeout=30,
                what="a dead letter for each oversized input",
            )
            reasons = {
                letter["key"]: letter["error"] for letter in letters.values(names.dead_letters)
            }
            await asyncio.sleep(2.0)  # A crashed runtime would exit within the watchdog's beat.
            fault_figures.sent = len(oversized) + 1
            fault_figures.came_out = len(fleet.commands_for("ordinary")) + len(reasons)
            fault_figures.lost = 0 if "ordinary" not in reasons else 1
            fault_figures.extra = {"dead letters": len(reasons), "worker alive": _alive(worker)}
        assert set(reasons) == {"huge-hostname", "many-labels", "big-args"}
        assert "hostname" in reasons["huge-hostname"]
        assert "label" in reasons["many-labels"]
        assert "args" in reasons["big-args"] and "bytes" in reasons["big-args"]
        assert not any(command["host_id"] != "ordinary" for command in fleet.commands)
        assert _alive(worker), worker.log()[-3000:]
    finally:
        await producer.stop()


async def test_unreadable_state_records_are_dead_lettered_and_every_other_host_is_rebuilt(
    make_settings, workers, fault_figures: FaultFigures
) -> None:
    settings: Settings = make_settings(
        clock_speed=TEN_MINUTES_PER_SECOND, clock_origin=datetime.now(UTC)
    )
    names = settings.topics
    changelog = f"{names.prefix}{settings.app_id}-hosts-changelog"
    first = workers(settings)
    producer = await start_producer(settings)
    try:
        # Critical hosts are due every 15 scheduler minutes: every 1.5 s here.
        await producer.send_and_wait(
            names.schedule_changes,
            config_updated(interval_critical=15, scan_timeout_seconds=3600)
            .model_dump_json()
            .encode(),
            key=CONFIG_KEY.encode(),
        )
        await asyncio.sleep(1.0)
        # The unreadable records come first in the changelog, so a rebuild that stopped at the
        # first of them would leave every real host out of the due index.
        newer_schema = {"host_id": "from-the-future", "version": 1, "field_from_v9": True}
        for partition in range(settings.partitions):
            await producer.send_and_wait(
                changelog,
                b"\x00garbage\xff",
                key=json.dumps(f"garbage-{partition}").encode(),
                partition=partition,
            )
        await producer.send_and_wait(
            changelog, json.dumps(newer_schema).encode(), key=b'"from-the-future"', partition=0
        )
        hosts = [f"host-{n:02d}" for n in range(HOSTS)]
        async with ScannerFleet(settings, score_for=always(0)) as fleet:
            for host in hosts:
                await producer.send(
                    names.object_created,
                    host_created(host).model_dump_json().encode(),
                    key=host.encode(),
                )
            await producer.flush()
            await wait_until(
                lambda: all(fleet.commands_for(host) for host in hosts),
                timeout=60,
                what="a first scan of every host",
            )
            first.stop()
            letters = Collector(settings, names.dead_letters)
            async with letters:
                restarted_at = len(fleet.commands)
                second = workers(settings)

                def scanned_after_restart() -> set[str]:
                    return {command["host_id"] for command in fleet.commands[restarted_at:]}

                def unreadable() -> list[dict[str, object]]:
                    return [
                        letter
                        for letter in letters.values(names.dead_letters)
                        if "unreadable state record" in str(letter["error"])
                        and letter["source_topic"] == changelog
                    ]

                await wait_until(
                    lambda: scanned_after_restart() >= set(hosts),
                    timeout=60,
                    what="every host scanned again after the restart",
                )
                await wait_until(
                    lambda: (
                        {str(letter["key"]) for letter in unreadable()}
                        >= {"from-the-future", "garbage-0"}
                    ),
                    timeout=30,
                    what="the unreadable state records in dead-letters",
                )
                fault_figures.sent = HOSTS + settings.partitions + 1
                fault_figures.came_out = len(scanned_after_restart() & set(hosts))
                fault_figures.lost = HOSTS - fault_figures.came_out
                fault_figures.extra = {
                    "unreadable records dead-lettered": len(
                        {str(letter["key"]) for letter in unreadable()}
                    ),
                    "worker alive": _alive(second),
                }
        assert fault_figures.lost == 0
        assert fault_figures.extra["unreadable records dead-lettered"] == settings.partitions + 1
        assert _alive(second)
    finally:
        await producer.stop()
