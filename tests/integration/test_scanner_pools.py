"""Two scanners on a real broker, each with its own pool under the fleet-wide ceiling: the
adaptive scanner's hosts and a port scanner's schedule run fill their pools independently;
deactivating the port scanner while its commands wait holds them (none is issued, none is
dropped), and reactivating it issues them."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from kairos.floor.settings import Settings
from kairos.localstack.ports import free_port
from schemas.changes import ScannerUpserted
from schemas.config import ScannerSpec
from schemas.topics import CONFIG_KEY
from tests.support.factories import host_created, scan_result, schedule_triggered, schedule_upserted
from tests.support.kafka import Collector, configure, publish, start_producer, wait_until
from tests.support.metrics import sample

pytestmark = pytest.mark.integration

HOSTS = [f"pooled-{i}" for i in range(4)]


async def _register(settings: Settings, producer: Any, spec: ScannerSpec) -> None:
    change = ScannerUpserted(
        event_id=uuid.uuid4(), occurred_at=datetime.now(UTC), actor="tests", scanner=spec
    )
    await publish(producer, settings.topics.schedule_changes, CONFIG_KEY, change)
    control = settings.topics.scheduler_control
    wanted = spec.model_dump(mode="json")
    async with Collector(settings, control) as records:
        await records.wait_for(
            lambda: any(
                wanted in message.get("config", {}).get("scanners", [])
                for message in records.values(control)
            ),
            timeout=30,
            what=f"the scanner {spec.name} registered",
        )
    await asyncio.sleep(0.5)  # The workers' fetch of the control topic comes back.


def _gauge(settings: Settings, name: str, scanner: str) -> float:
    return sample(settings, name, scanner=scanner) or 0.0


async def test_two_scanner_pools_fill_independently_and_an_inactive_one_is_held(
    make_settings: Any, workers: Any
) -> None:
    settings: Settings = make_settings(metrics_port=free_port())
    workers(settings)
    names = settings.topics
    producer = await start_producer(settings)
    await configure(settings, producer, max_concurrent_scans=10, initial_spread_seconds=0)
    await _register(settings, producer, ScannerSpec(name="compliance", max_concurrent=2))
    ports = ScannerSpec(name="portscan", max_concurrent=1, timeout_seconds=3600)
    await _register(settings, producer, ports)

    def pools(compliance: tuple[int, int], portscan: tuple[int, int]) -> bool:
        return all(
            (
                _gauge(settings, "kairos_scanner_in_flight", scanner),
                _gauge(settings, "kairos_scanner_waiting", scanner),
            )
            == expected
            for scanner, expected in (("compliance", compliance), ("portscan", portscan))
        )

    async with Collector(settings, names.scan_commands) as seen:

        def commands(scanner: str) -> list[dict[str, Any]]:
            return [c for c in seen.values(names.scan_commands) if c["scanner"] == scanner]

        for host_id in HOSTS:
            await publish(producer, names.object_created, host_id, host_created(host_id))
        await wait_until(lambda: len(commands("compliance")) == 2, timeout=30, what="2 scans")
        schedule = schedule_upserted(
            "ports", scanner="portscan", recurrence={"kind": "none"}, priority=3
        )
        await publish(producer, names.schedule_changes, "ports", schedule)
        await publish(producer, names.schedule_changes, "ports", schedule_triggered("ports"))
        await wait_until(
            lambda: pools(compliance=(2, 2), portscan=(1, 3)) and commands("portscan"),
            timeout=30,
            what="both pools full, the rest waiting",
        )
        assert len(commands("compliance")) == 2 and len(commands("portscan")) == 1
        [first_port] = commands("portscan")
        deadline = datetime.fromisoformat(first_port["deadline"])
        issued = datetime.fromisoformat(first_port["issued_at"])
        assert (deadline - issued).total_seconds() == 3600  # the scanner's own timeout

        # Deactivated while its commands wait: held, not dropped.
        await _register(settings, producer, ports.model_copy(update={"is_active": False}))
        await publish(
            producer, names.scan_completed, first_port["host_id"], scan_result(first_port)
        )
        compliance_done = commands("compliance")[0]
        await publish(
            producer, names.scan_completed, compliance_done["host_id"], scan_result(compliance_done)
        )
        await wait_until(
            lambda: pools(compliance=(2, 1), portscan=(0, 3)) and len(commands("compliance")) == 3,
            timeout=30,
            what="the port pool empty and held, the compliance pool refilled",
        )
        assert len(commands("portscan")) == 1, "an inactive scanner's command was issued"
        assert len(commands("compliance")) == 3

        # Active again: its held commands go out, one at a time in its pool of one.
        await _register(settings, producer, ports)
        await wait_until(lambda: len(commands("portscan")) == 2, timeout=30, what="held issued")
        await wait_until(
            lambda: pools(compliance=(2, 1), portscan=(1, 2)), timeout=30, what="pools settled"
        )
    await producer.stop()
    hosts = {c["host_id"] for c in commands("portscan")}
    assert len(hosts) == 2 and hosts <= set(HOSTS)
