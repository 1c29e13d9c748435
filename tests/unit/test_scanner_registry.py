"""The scanner registry lives in the scheduler config and changes only by events:
`compliance` is registered from the start with today's settings, `scanner.upserted` registers
or replaces one, and a bad entry is refused whole."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from schemas.changes import ScannerUpserted
from schemas.commands import Rejection
from schemas.config import ADAPTIVE_SCANNER, ScannerSpec, SchedulerConfig
from streams.policy.config import apply_config_change


def _upserted(spec: ScannerSpec) -> ScannerUpserted:
    return ScannerUpserted(
        event_id=uuid.uuid4(), occurred_at=datetime(2030, 1, 1, tzinfo=UTC), scanner=spec
    )


def test_a_fresh_install_has_compliance_with_todays_settings() -> None:
    config = SchedulerConfig(max_concurrent_scans=7, scan_timeout_seconds=900)

    [adaptive] = config.registry()

    assert adaptive.name == ADAPTIVE_SCANNER and adaptive.is_active
    assert (adaptive.max_concurrent, adaptive.timeout_seconds) == (7, 900)
    assert adaptive.retry_delay_seconds == config.retry_delay_seconds
    assert config.scanner("nmap") is None


def test_registering_a_scanner_adds_it_and_bumps_the_version() -> None:
    config = SchedulerConfig()

    after = apply_config_change(config, _upserted(ScannerSpec(name="nmap", max_concurrent=3)))

    assert isinstance(after, SchedulerConfig)
    assert after.version == config.version + 1
    assert [spec.name for spec in after.registry()] == [ADAPTIVE_SCANNER, "nmap"]
    nmap = after.scanner("nmap")
    assert nmap is not None and nmap.max_concurrent == 3


def test_an_entry_is_replaced_whole_and_compliance_can_be_given_its_own() -> None:
    config = apply_config_change(SchedulerConfig(), _upserted(ScannerSpec(name="nmap")))
    assert isinstance(config, SchedulerConfig)

    config = apply_config_change(config, _upserted(ScannerSpec(name="nmap", is_active=False)))
    assert isinstance(config, SchedulerConfig)
    config = apply_config_change(
        config, _upserted(ScannerSpec(name=ADAPTIVE_SCANNER, max_concurrent=40))
    )
    assert isinstance(config, SchedulerConfig)

    assert [spec.name for spec in config.scanners] == ["nmap", ADAPTIVE_SCANNER]
    nmap, adaptive = config.scanner("nmap"), config.scanner(ADAPTIVE_SCANNER)
    assert nmap is not None and not nmap.is_active
    assert adaptive is not None and adaptive.max_concurrent == 40
    assert config.registry()[0].name == ADAPTIVE_SCANNER


@pytest.mark.parametrize(
    "fields",
    [{"name": "Bad Name"}, {"name": "x", "max_concurrent": 0}, {"name": "x", "timeout_seconds": 5}],
)
def test_a_bad_entry_is_refused_naming_the_field(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as raised:
        ScannerSpec.model_validate(fields)
    assert next(iter(fields.keys() - {"name"}), "name") in str(raised.value)


def test_a_rejection_leaves_the_config_as_it_was() -> None:
    config = SchedulerConfig()
    spec = ScannerSpec.model_construct(name="nmap", max_concurrent=-1)

    result = apply_config_change(config, _upserted(spec))

    assert isinstance(result, Rejection) and "max_concurrent" in result.reason
