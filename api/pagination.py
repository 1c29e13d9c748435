"""Opaque keyset cursors: base64url JSON of the sort key of the last row served."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from api.errors import InvalidInput

T = TypeVar("T")

CursorKey = tuple[Any, ...]


def _encode_value(value: Any) -> Any:
    return {"t": value.isoformat()} if isinstance(value, datetime) else value


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"t"} and isinstance(value["t"], str):
        instant = datetime.fromisoformat(value["t"])
        if instant.tzinfo is None:
            raise ValueError("naive instant")
        return instant
    return value


def encode_cursor(key: CursorKey) -> str:
    raw = json.dumps([_encode_value(value) for value in key], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None, *, shape: Sequence[type]) -> CursorKey | None:
    """The key in `cursor`, checked against `shape`; InvalidInput naming `cursor` if bad."""
    if cursor is None:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        key = tuple(_decode_value(value) for value in values)
    except (ValueError, TypeError, binascii.Error, UnicodeError):
        raise InvalidInput("cursor", "not a cursor this API gave out") from None
    if len(key) != len(shape) or not all(
        isinstance(value, kind) for value, kind in zip(key, shape, strict=True)
    ):
        raise InvalidInput("cursor", "not a cursor this API gave out")
    return key


def split_page(
    rows: list[T], limit: int, key_of: Callable[[T], CursorKey]
) -> tuple[list[T], str | None]:
    """Rows fetched with `limit + 1` -> (the page, cursor of the next page or None)."""
    if len(rows) <= limit:
        return rows, None
    page = rows[:limit]
    return page, encode_cursor(key_of(page[-1]))
