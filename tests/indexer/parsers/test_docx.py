"""Word: heading styles become paths, tables one line per row, pages from the file's page breaks."""

from __future__ import annotations

import pytest

from indexer.documents import SourceFile
from indexer.parsers import ParseError, parse
from tests.indexer.parsers.conftest import Passages
from tests.support.office import encrypt, make_docx


def test_headings_tables_and_pages(passages: Passages) -> None:
    assert passages("handbook.docx", make_docx()) == [
        ("Welcome to the company.", {"char_start": 0, "char_end": 23, "page": 1}),
        ("Book trains two weeks early.\n\nHotels need approval.",
         {"char_start": 43, "char_end": 94, "headings": ["Handbook", "Travel"], "page": 1}),
        ("Taxis are fine after midnight.\n\nCity | Daily budget\nParis | 200 EUR",
         {"char_start": 96, "char_end": 163, "headings": ["Handbook", "Travel"], "page": 2}),
        ("Keep every receipt.", {"char_start": 175, "char_end": 194, "headings": ["Handbook", "Travel", "Expenses"],
                                 "page": 2}),
    ]


def test_metadata_title_and_pages() -> None:
    (doc,) = parse(SourceFile("handbook.docx", make_docx()))
    assert doc.metadata == {"title": "Staff handbook", "pages": 2}


def test_a_document_that_is_only_headings_indexes_them(passages: Passages) -> None:
    import io

    import docx

    d = docx.Document()
    d.add_heading("Quarterly plan", 1)
    out = io.BytesIO()
    d.save(out)
    assert passages("plan.docx", out.getvalue()) == [
        ("Quarterly plan", {"char_start": 0, "char_end": 14, "headings": ["Quarterly plan"]})]


@pytest.mark.parametrize(("mangle", "match"), [
    (encrypt, "docx file is encrypted"),
    (lambda data: data[: len(data) // 2], "not a valid docx file"),
    (lambda data: b"PK\x03\x04" + b"\x00" * 64, "not a valid docx file"),
])
def test_encrypted_or_corrupt_is_a_parse_error(mangle, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParseError, match=match):
        parse(SourceFile("handbook.docx", mangle(make_docx())))
