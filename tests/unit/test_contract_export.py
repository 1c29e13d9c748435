"""The checked-in contract export must match what schemas/ generates."""

from __future__ import annotations

from schemas.export import DEFAULT_DIR, PUBLIC_TOPICS, schema_documents


def test_checked_in_contract_export_is_current() -> None:
    documents = schema_documents()
    stale = [
        name
        for name, text in documents.items()
        if not (DEFAULT_DIR / name).exists()
        or (DEFAULT_DIR / name).read_text(encoding="utf-8") != text
    ]
    assert not stale, f"regenerate with `python -m schemas.export`: stale {stale}"


def test_every_public_topic_is_exported_with_event_id_and_schema_version() -> None:
    documents = schema_documents()
    assert len(documents) == len(PUBLIC_TOPICS)
    for topic in PUBLIC_TOPICS:
        text = documents[f"{topic}.schema.json"]
        assert '"event_id"' in text and '"schema_version"' in text, topic
