"""Excel: a table section per sheet, whole rows under the header, ``sheet`` and ``rows`` in the location."""

from __future__ import annotations

import io

import pytest

from indexer.documents import SourceFile
from indexer.parsers import ParseError, parse, xlsx
from tests.indexer.parsers.conftest import Passages
from tests.support.office import encrypt, make_xlsx


def test_rows_under_the_header_per_sheet(passages: Passages) -> None:
    assert passages("sales.xlsx", make_xlsx()) == [
        ("Region | Revenue | Closed\nNorth | 1200 | 2024-01-05\nSouth | 0.3 | TRUE\nEast | 7 | 2024-02-01 09:30:00",
         {"char_start": 33, "char_end": 108, "headings": ["Sales"], "sheet": "Sales", "rows": [2, 5]}),
        ("Figures are in thousands",
         {"char_start": 117, "char_end": 141, "headings": ["Notes"], "sheet": "Notes"}),
    ]
    (doc,) = parse(SourceFile("sales.xlsx", make_xlsx()))
    assert doc.metadata == {"sheets": 3}


def test_small_chunks_keep_the_header(passages: Passages) -> None:
    got = passages("sales.xlsx", make_xlsx(), size=24)
    assert [(text, where["rows"]) for text, where in got if where["sheet"] == "Sales"] == [
        ("Region | Revenue | Closed\nNorth | 1200 | 2024-01-05", [2, 2]),
        ("Region | Revenue | Closed\nSouth | 0.3 | TRUE", [4, 4]),
        ("Region | Revenue | Closed\nEast | 7 | 2024-02-01 09:30:00", [5, 5]),
    ]


def test_a_far_away_cell_costs_only_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    book.active["A1"] = "start"
    book.active["XFD1048576"] = "end"  # the sheet now claims 17 billion cells
    out = io.BytesIO()
    book.save(out)
    (doc,) = parse(SourceFile("far.xlsx", out.getvalue()))
    assert doc.full_text == "Sheet\n\nstart\n | end\n\n"  # the 16,382 empty columns between are left out
    assert doc.sections[0].table is not None and doc.sections[0].table.rows == ((1048576, 0),)
    monkeypatch.setattr(xlsx, "MAX_CELLS", 100)
    with pytest.raises(ParseError, match="more than 100 cells"):
        parse(SourceFile("far.xlsx", out.getvalue()))


@pytest.mark.parametrize(("mangle", "match"), [
    (encrypt, "xlsx file is encrypted"),
    (lambda data: data[: len(data) // 2], "not a valid xlsx file"),
])
def test_encrypted_or_corrupt_is_a_parse_error(mangle, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParseError, match=match):
        parse(SourceFile("sales.xlsx", mangle(make_xlsx())))
