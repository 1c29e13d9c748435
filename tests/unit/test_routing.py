"""Where an input record belongs: its key's murmur2 partition, whatever partition it landed on."""

from __future__ import annotations

import logging
import zlib
from datetime import UTC, datetime

import pytest
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from kairos.floor.prometheus import Counter
from schemas.internal import ScheduleFanOut
from schemas.schedules import RunPlan
from streams import codec
from streams.partition_index import key_partition, murmur2, partition_of
from streams.routing import FAN_OUT_PREFIX, Router, forward_partition, guess_partitioner
from tests.unit.schedule_factories import cron, schedule

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SIGNALS = "kairos-host-signals"


def _signed(value: int) -> int:
    return value - (1 << 32) if value & 0x80000000 else value


@pytest.mark.parametrize(
    ("data", "java"),
    [  # Kafka's own UtilsTest.testMurmur2 cases: what Java's Utils.murmur2 returns.
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_is_javas(data: bytes, java: int) -> None:
    assert _signed(murmur2(data)) == java


@given(st.binary(max_size=200))
def test_murmur2_is_aiokafkas(data: bytes) -> None:
    assert murmur2(data) == aiokafka_murmur2(data)


@given(st.text(max_size=60), st.integers(min_value=1, max_value=1024))
def test_a_record_on_its_keys_partition_stays(host_id: str, partitions: int) -> None:
    key = host_id.encode()
    landed = key_partition(key, partitions)
    assert landed == partition_of(host_id, partitions)
    assert forward_partition(key, partitions, landed) is None


@given(st.binary(max_size=60), st.integers(min_value=2, max_value=64), st.data())
def test_a_record_off_its_keys_partition_goes_to_it(
    key: bytes, partitions: int, data: st.DataObject
) -> None:
    home = key_partition(key, partitions)
    landed = data.draw(st.integers(0, partitions - 1).filter(lambda p: p != home))
    assert forward_partition(key, partitions, landed) == home


def test_decisions_for_written_out_keys() -> None:
    # murmur2 as Java's client: host-0001 → 11 of 12; librdkafka's CRC32 puts it on 1.
    assert forward_partition(b"host-0001", 12, 11) is None
    assert forward_partition(b"host-0001", 12, 1) == 11
    assert zlib.crc32(b"host-0001") % 12 == 1
    assert forward_partition(None, 12, 3) is None  # Keyless: handled where it lands.
    assert forward_partition(b"anything", 1, 0) is None


def test_the_guess_names_librdkafkas_default_for_a_crc32_placement() -> None:
    key = b"host-0001"
    assert "consistent_random" in guess_partitioner(key, 12, zlib.crc32(key) % 12)


def _router(clock: list[float] | None = None) -> tuple[Router, Counter]:
    forwarded = Counter("forwarded", "forwarded", ("topic",))
    now = clock if clock is not None else [0.0]
    router = Router(partitions=12, host_signals=SIGNALS, forwarded=forwarded, clock=lambda: now[0])
    return router, forwarded


def test_the_router_forwards_keyed_records_off_their_partition_and_counts_them() -> None:
    router, forwarded = _router()
    assert router.destination("object-created", 1, b"host-0001", b"{}") == 11
    assert router.destination("object-created", 11, b"host-0001", b"{}") is None
    assert router.destination("scan-completed", 1, None, b"{}") is None
    assert router.destination(SIGNALS, 1, b"host-0001", b'{"kind":"host.replan"}') == 11
    assert forwarded.values == {("object-created",): 1.0, (SIGNALS,): 1.0}


def test_fan_outs_stay_on_the_partition_they_were_sent_to() -> None:
    fan_out = ScheduleFanOut(
        schedule=schedule(cron("* * * * *"), schedule_id="nightly"),
        run=RunPlan(schedule_id="nightly", occurrence=NOW, due_at=NOW),
        expected=12,
    )
    encoded = codec.encode(fan_out)
    batch = codec.schedule_fan_outs([encoded, encoded])
    assert encoded.startswith(FAN_OUT_PREFIX) and batch.startswith(FAN_OUT_PREFIX)
    router, forwarded = _router()
    elsewhere = (partition_of("nightly", 12) + 1) % 12
    assert router.destination(SIGNALS, elsewhere, b"nightly", encoded) is None
    # The same bytes on an input topic are checked like any record.
    assert router.destination("schedule-changes", elsewhere, b"nightly", encoded) is not None
    assert forwarded.values == {("schedule-changes",): 1.0}


def test_one_log_line_per_topic_and_pattern_at_most_every_few_minutes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [1000.0]
    router, _ = _router(clock)
    crc32_placed = [
        (key, zlib.crc32(key) % 12)
        for key in (f"host-{n:04d}".encode() for n in range(200))
        if zlib.crc32(key) % 12 != key_partition(key, 12)
    ]
    with caplog.at_level(logging.WARNING, logger="streams.routing"):
        for key, landed in crc32_placed:
            router.destination("object-created", landed, key, b"{}")
        first = [r for r in caplog.records if "consistent_random" in r.getMessage()]
        assert len(first) == 1
        clock[0] += 301.0
        for key, landed in crc32_placed:
            router.destination("object-created", landed, key, b"{}")
    lines = [r.getMessage() for r in caplog.records if "consistent_random" in r.getMessage()]
    assert len(lines) == 2
    assert lines[1].startswith(f"object-created: {len(crc32_placed)} record(s)")
