"""The audit row each change becomes: its subject, its actor, and a compact summary."""

from __future__ import annotations

from types import SimpleNamespace

from schemas.changes import HostMaintenanceSet, ScannerUpserted
from schemas.config import ScannerSpec
from schemas.objects import Operation
from streams.projection.audit import change_entry, decode_change, decode_object
from tests.support.factories import (
    config_updated,
    host_created,
    schedule_paused,
    schedule_upserted,
)


def record(value: bytes, headers: list[tuple[str, bytes]] | None = None) -> SimpleNamespace:
    return SimpleNamespace(value=value, headers=headers or [])


def test_a_schedule_change_names_the_schedule_and_its_actor() -> None:
    paused = schedule_paused("nightly").model_copy(update={"actor": "ops-admin"})
    entry = change_entry(paused)
    assert (entry.type, entry.subject_kind, entry.subject_id) == (
        "schedule.paused",
        "schedule",
        "nightly",
    )
    assert entry.actor == "ops-admin" and entry.event_id == paused.event_id
    assert entry.at == paused.occurred_at


def test_a_schedule_upsert_is_summarised_without_nested_definitions() -> None:
    upsert = schedule_upserted("weekly").model_copy(update={"create_only": True})
    entry = change_entry(upsert)
    assert entry.summary["create_only"] is True
    assert entry.summary["schedule"]["id"] == "weekly"
    assert not any(isinstance(v, dict | list) for v in entry.summary["schedule"].values())


def test_host_config_and_scanner_changes_have_their_subjects() -> None:
    fields = config_updated(interval_critical=30)
    maintenance = HostMaintenanceSet(
        event_id=fields.event_id,
        occurred_at=fields.occurred_at,
        actor="analyst",
        host_id="web-1",
        enabled=True,
        duration_hours=2,
    )
    entry = change_entry(maintenance)
    assert (entry.subject_kind, entry.subject_id) == ("host", "web-1")
    assert entry.summary == {"enabled": True, "duration_hours": 2}
    config = change_entry(fields)
    assert (config.subject_kind, config.subject_id) == ("config", "config")
    assert config.summary == {"changes": {"interval_critical": 30}}
    scanner = change_entry(
        ScannerUpserted(
            event_id=fields.event_id,
            occurred_at=fields.occurred_at,
            scanner=ScannerSpec(name="nmap", max_concurrent=3),
        )
    )
    assert (scanner.subject_kind, scanner.subject_id, scanner.actor) == (
        "scanner",
        "nmap",
        "system",
    )


def test_an_inventory_event_takes_its_actor_from_the_header() -> None:
    event = host_created("db-1", organization="acme")
    entry = decode_object(record(event.model_dump_json().encode(), [("kairos-actor", b"ops")]))
    assert entry is not None
    assert (entry.type, entry.subject_kind, entry.subject_id) == ("host.created", "host", "db-1")
    assert entry.actor == "ops" and entry.summary["attributes"]["organization"] == "acme"
    deleted = event.model_copy(update={"operation": Operation.DELETED})
    anonymous = decode_object(record(deleted.model_dump_json().encode()))
    assert anonymous is not None and anonymous.actor is None
    assert anonymous.type == "host.deleted"


def test_undecodable_records_become_no_row() -> None:
    assert decode_object(record(b"not json")) is None
    assert decode_change(record(b'{"type": "schedule.paused"}')) is None
