"""CSV and TSV: whole records under the header, row numbers as a spreadsheet shows them."""

from __future__ import annotations

import pytest

from indexer.documents import SourceFile
from indexer.parsers import ParseError, parse
from tests.indexer.parsers.conftest import Passages

PEOPLE = b'name,age,city\r\nAlice,30,Paris\r\n\r\nBob,41,"Saint\nMalo"\r\nCara,22,Rome\r\n'


def test_records_under_the_header_with_row_numbers(passages: Passages) -> None:
    assert passages("people.csv", PEOPLE) == [
        ('name,age,city\nAlice,30,Paris\r\n\r\nBob,41,"Saint\nMalo"\r\nCara,22,Rome',
         {"char_start": 15, "char_end": 66, "rows": [2, 5]})]


def test_every_chunk_repeats_the_header(passages: Passages) -> None:
    assert passages("people.csv", PEOPLE, size=16) == [
        ("name,age,city\nAlice,30,Paris", {"char_start": 15, "char_end": 29, "rows": [2, 2]}),
        ('name,age,city\nBob,41,"Saint\nMalo"', {"char_start": 33, "char_end": 52, "rows": [4, 4]}),
        ("name,age,city\nCara,22,Rome", {"char_start": 54, "char_end": 66, "rows": [5, 5]}),
    ]


def test_semicolons_are_sniffed_and_tsv_is_tab_separated() -> None:
    (semi,) = parse(SourceFile("eu.csv", b"produit;prix\npain;1,20\nlait;0,95\n"))
    (tabs,) = parse(SourceFile("t.tsv", b"a\tb\n1\t2\n"))
    assert semi.sections[0].table is not None and semi.sections[0].table.header == "produit;prix"
    assert [r for r, _ in semi.sections[0].table.rows] == [2, 3] and semi.metadata == {"rows": 2}
    assert tabs.sections[0].table is not None and tabs.sections[0].table.rows == ((2, 0),)


def test_a_header_only_file_indexes_the_header(passages: Passages) -> None:
    assert passages("h.csv", b"\nid,name\n") == [("id,name", {"char_start": 1, "char_end": 8})]


@pytest.mark.parametrize(("data", "match"), [
    (b"a,b\ncaf\xe9,1\n", "not valid UTF-8"),
    (b'a,b\n"' + b"x" * 200_000 + b'",1\n', "field larger than field limit"),
])
def test_a_broken_csv_is_a_parse_error(data: bytes, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse(SourceFile("bad.csv", data))
