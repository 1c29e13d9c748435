"""Changelog keys written by the hot paths are the bytes Faust itself writes for the key."""

from __future__ import annotations

import faust

from kairos.floor.settings import Settings
from streams.direct import changelog_key
from streams.topology import HOSTS


def test_changelog_keys_are_the_ones_faust_writes() -> None:
    app = faust.App("changelog-keys", broker="kafka://localhost:9")  # never connects
    table = HOSTS.declare(app, Settings())
    for key in ("host-1", "hôte-ü", 'quote"d', "back\\slash", "tab\tand\nnewline", ""):
        faust_bytes, _ = table.changelog_topic.prepare_key(key, table.key_serializer)

        assert changelog_key(table, key) == faust_bytes
