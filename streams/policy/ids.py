"""Deterministic identifiers: a replay re-derives the same ids."""

from __future__ import annotations

import hashlib
import uuid

_COMMANDS = uuid.UUID("6f1c4a52-8a3e-4d67-9d1b-5f7c0e2b9a10")
_MESSAGES = uuid.UUID("0b7e9c3d-2f41-4a8e-b6d5-91a3c7e4f208")


def command_id(
    host_id: str, due_instance: int, attempt: int, incarnation: str = "", withdrawals: int = 0
) -> str:
    """One id per (host, due instance, attempt): re-sent commands keep it, retries change it.

    `incarnation` tells apart a host deleted and created again, whose counters restart;
    `withdrawals` tells apart claims of one due instance withdrawn before they were issued.
    The text of `uuid.uuid5(_COMMANDS, name)`, formatted from the digest without building a
    UUID object only to format it: this runs once per claim.
    """
    name = f"{host_id}/{incarnation}/{due_instance}/{attempt}".encode()
    if withdrawals:
        # A claim withdrawn before issue is released for good: the next one needs its own id.
        # Left out while 0, so every id made before withdrawals existed stays the same.
        name += b"/w%d" % withdrawals
    digest = bytearray(hashlib.sha1(_COMMANDS.bytes + name).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    hex_digits = digest.hex()
    return (
        f"{hex_digits[:8]}-{hex_digits[8:12]}-{hex_digits[12:16]}-{hex_digits[16:20]}"
        f"-{hex_digits[20:]}"
    )


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
