"""Parsing a bulk host import: JSON lines, a JSON array or CSV, into validated rows.

Pure: bytes in, rows out, or InvalidInput naming the first bad line. Nothing is published
unless every row is valid.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from pydantic import ValidationError

from api.errors import InvalidInput
from schemas.api import HostImportRow

MAX_IMPORT_ROWS = 100_000
JSON_LINES_TYPES = frozenset(
    {
        "application/x-ndjson",
        "application/jsonl",
        "application/x-jsonlines",
        "application/jsonlines",
    }
)
CSV_TYPES = frozenset({"text/csv", "application/csv"})
CSV_COLUMNS = ("id", "hostname", "organization", "labels", "active")
TRUE_WORDS = frozenset({"true", "1", "yes", "y"})
FALSE_WORDS = frozenset({"false", "0", "no", "n"})


def parse_import(body: bytes, content_type: str) -> list[HostImportRow]:
    """The rows of `body` as its media type says; InvalidInput names the first bad line."""
    media = content_type.split(";", 1)[0].strip().lower()
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput("body", "must be UTF-8 text", location="body") from None
    if media in CSV_TYPES:
        raw = _csv_rows(text)
    elif media in JSON_LINES_TYPES:
        raw = _json_lines(text)
    elif media == "application/json":
        raw = _json_array(text)
    else:
        raise InvalidInput(
            "content-type",
            "send text/csv, application/x-ndjson (JSON lines) or application/json (an array)",
            location="header",
        )
    if not raw:
        raise InvalidInput("body", "give at least one host", location="body")
    if len(raw) > MAX_IMPORT_ROWS:
        raise InvalidInput(
            "body", f"at most {MAX_IMPORT_ROWS} hosts per import; split the file", location="body"
        )
    rows: list[HostImportRow] = []
    seen: dict[str, int] = {}
    for line, values in raw:
        try:
            row = HostImportRow.model_validate(values)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "row"
            raise InvalidInput(
                f"line {line}", f"{where}: {first['msg']}", location="body"
            ) from None
        if row.id in seen:
            raise InvalidInput(
                f"line {line}", f"host {row.id!r} is also on line {seen[row.id]}", location="body"
            )
        seen[row.id] = line
        rows.append(row)
    return rows


def _json_lines(text: str) -> list[tuple[int, Any]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            rows.append((number, _json(line, number)))
    return rows


def _json_array(text: str) -> list[tuple[int, Any]]:
    items = _json(text, 1)
    if not isinstance(items, list):
        raise InvalidInput("body", "application/json must be an array of hosts", location="body")
    return [(number, item) for number, item in enumerate(items, start=1)]


def _json(text: str, line: int) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidInput(f"line {line}", f"not JSON: {error.msg}", location="body") from None


def _csv_rows(text: str) -> list[tuple[int, Any]]:
    # newline="" lets the csv module see the line endings itself, as its docs require; a
    # stray carriage return is then a line ending, not an unhandled csv.Error; strict mode
    # refuses a stray or unclosed quote (422) instead of guessing what the cell meant.
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    try:
        return _csv_records(reader)
    except csv.Error as error:
        raise InvalidInput(
            f"line {reader.line_num + 1}", f"not CSV: {error}", location="body"
        ) from None


def _csv_records(reader: csv.DictReader[str]) -> list[tuple[int, Any]]:
    header = [name.strip() for name in reader.fieldnames or []]
    unknown = [name for name in header if name not in CSV_COLUMNS]
    if "id" not in header or unknown:
        raise InvalidInput(
            "line 1",
            f"the header must name `id` and only columns of {', '.join(CSV_COLUMNS)}",
            location="body",
        )
    rows = []
    for record in reader:
        line = reader.line_num
        if None in record:
            raise InvalidInput(f"line {line}", "more cells than header columns", location="body")
        cells = {key.strip(): (value or "").strip() for key, value in record.items()}
        if not any(cells.values()):
            continue
        values: dict[str, Any] = {"id": cells["id"]}
        for name in ("hostname", "organization"):
            if cells.get(name):
                values[name] = cells[name]
        if cells.get("labels"):
            values["labels"] = _csv_labels(cells["labels"], line)
        if cells.get("active"):
            values["active"] = _csv_bool(cells["active"], line)
        rows.append((line, values))
    return rows


def _csv_labels(cell: str, line: int) -> Any:
    """`env=prod;team=blue`, or a JSON object."""
    if cell.startswith("{"):
        return _json(cell, line)
    labels = {}
    for pair in cell.split(";"):
        if not pair.strip():
            continue
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise InvalidInput(
                f"line {line}", f"labels: {pair!r} is not key=value", location="body"
            )
        labels[key.strip()] = value.strip()
    return labels


def _csv_bool(cell: str, line: int) -> bool:
    word = cell.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise InvalidInput(f"line {line}", f"active: {cell!r} is not true or false", location="body")
