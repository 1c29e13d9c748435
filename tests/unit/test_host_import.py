"""Parsing a bulk host import: JSON lines, a JSON array or CSV, all rows valid or none."""

from __future__ import annotations

import pytest

from api.errors import InvalidInput
from api.routes.host_import import MAX_IMPORT_ROWS, parse_import
from schemas.api import HostImportRow


def test_json_lines_give_one_row_per_non_empty_line() -> None:
    body = (
        b'{"id": "h-1", "hostname": "h-1.example.test", "labels": {"env": "prod"}}\n'
        b"\n"
        b'{"id": "h-2", "active": false, "organization": "acme"}\n'
    )

    rows = parse_import(body, "application/x-ndjson")

    assert rows == [
        HostImportRow(id="h-1", hostname="h-1.example.test", labels={"env": "prod"}),
        HostImportRow(id="h-2", active=False, organization="acme"),
    ]


def test_json_array_is_accepted_too() -> None:
    rows = parse_import(b'[{"id": "a"}, {"id": "b"}]', "application/json; charset=utf-8")
    assert [row.id for row in rows] == ["a", "b"]


def test_csv_with_header_labels_as_pairs_or_json_and_active_words() -> None:
    body = (
        b"id,hostname,labels,active\r\n"
        b"h-1,h-1.example.test,env=prod;team=blue,true\r\n"
        b'h-2,,"{""env"": ""dev""}",no\r\n'
        b"h-3,,,\r\n"
    )

    rows = parse_import(body, "text/csv")

    assert rows == [
        HostImportRow(
            id="h-1", hostname="h-1.example.test", labels={"env": "prod", "team": "blue"}
        ),
        HostImportRow(id="h-2", labels={"env": "dev"}, active=False),
        HostImportRow(id="h-3"),
    ]


@pytest.mark.parametrize(
    ("body", "content_type", "field", "words"),
    [
        (b'{"id": "a"}\n{"id": ""}\n', "application/x-ndjson", "line 2", "id"),
        (b'{"id": "a"}\nnot json\n', "application/x-ndjson", "line 2", "not JSON"),
        (b'{"id": "a", "colour": "red"}\n', "application/x-ndjson", "line 1", "colour"),
        (b'{"id": "a", "active": "yes"}\n', "application/x-ndjson", "line 1", "active"),
        (b'{"id": "a"}\n{"id": "a"}\n', "application/x-ndjson", "line 2", "line 1"),
        (b"id,colour\na,red\n", "text/csv", "line 1", "header"),
        (b"hostname\nx\n", "text/csv", "line 1", "header"),
        (b"id,active\na,maybe\n", "text/csv", "line 2", "active"),
        (b"id,labels\na,env\n", "text/csv", "line 2", "key=value"),
        (b"id\na,b\n", "text/csv", "line 2", "more cells"),
        (b'id,hostname\na,"x"y"\n', "text/csv", "line 2", "not CSV"),
        (b'id\n"a', "text/csv", "line 2", "not CSV"),
        (b"\r0", "text/csv", "line 1", "header"),
        (b"", "application/x-ndjson", "body", "at least one"),
        (b'{"id": "a"}', "application/json", "body", "array"),
        (b'{"id": "a"}', "application/xml", "content-type", "text/csv"),
        (b"\xff\xfe", "text/csv", "body", "UTF-8"),
    ],
)
def test_a_bad_row_refuses_the_whole_import_naming_its_line(
    body: bytes, content_type: str, field: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_import(body, content_type)
    assert refused.value.field == field
    assert words in refused.value.message


def test_csv_line_endings_may_be_any_of_lf_crlf_or_cr() -> None:
    rows = parse_import(b"id,hostname\ra,x\r\nb,y\nc,z", "text/csv")
    assert [(row.id, row.hostname) for row in rows] == [("a", "x"), ("b", "y"), ("c", "z")]


def test_too_many_rows_are_refused() -> None:
    body = b"".join(b'{"id": "h-%d"}\n' % number for number in range(MAX_IMPORT_ROWS + 1))
    with pytest.raises(InvalidInput, match="at most"):
        parse_import(body, "application/x-ndjson")
