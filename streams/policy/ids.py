"""Deterministic identifiers: a replay re-derives the same ids."""

from __future__ import annotations

import hashlib
import uuid

_COMMANDS = uuid.UUID("6f1c4a52-8a3e-4d67-9d1b-5f7c0e2b9a10")
_MESSAGES = uuid.UUID("0b7e9c3d-2f41-4a8e-b6d5-91a3c7e4f208")


def command_id(host_id: str, due_instance: int, attempt: int, incarnation: str = "") -> str:
    """One id per (host, due instance, attempt): re-sent commands keep it, retries change it.

    `incarnation` tells apart a host deleted and created again, whose counters restart.
    """
    return str(uuid.uuid5(_COMMANDS, f"{host_id}/{incarnation}/{due_instance}/{attempt}"))


def message_id(*parts: str) -> uuid.UUID:
    """A stable event_id for a message Kairos derives from other messages."""
    return uuid.uuid5(_MESSAGES, "/".join(parts))


def spread_offset_seconds(host_id: str, window_seconds: int) -> int:
    """A stable offset in [0, window) for `host_id`, uniform over hosts."""
    if window_seconds <= 0:
        return 0
    digest = hashlib.blake2b(host_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % window_seconds


def event_fingerprint(event_id: object) -> str:
    """A short, collision-safe-enough key for remembering recent event ids per host (64 bits)."""
    if isinstance(event_id, uuid.UUID):
        return event_id.hex[:16]  # the same digits, without formatting the dashed form first
    return str(event_id).replace("-", "")[:16]
