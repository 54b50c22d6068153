"""Excel (.xlsx) → one table section per sheet (openpyxl, read-only, cached values): the sheet's first
non-empty row is its header, every chunk is whole rows under it, with ``sheet`` and ``rows`` (the sheet's
own row numbers) in its location and the sheet name as its heading.

Each row is one line of cells joined by `` | `` (columns empty in every row left out); numbers print as
Excel shows them by default (up to 15 significant digits), dates in ISO form, formulas as the value Excel
last computed (a file never opened in Excel has none). The text is ``<sheet>\\n\\n<header>\\n<rows>`` per
sheet, which offsets point into. Rows are read sparsely and the cells a workbook may expand to are capped
(:data:`MAX_CELLS`), so a sheet that claims a million rows or columns costs only the cells it holds.
"""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

from indexer.documents import ParsedDocument, Section, Table
from indexer.parsers.errors import ParseError
from indexer.parsers.ooxml import check_package

MAX_CELLS = 5_000_000


def parse(name: str, data: bytes) -> ParsedDocument:
    from openpyxl import load_workbook

    check_package(data, "xlsx")
    book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    parts: list[str] = []
    size = 0
    sections: list[Section] = []
    cells = 0
    try:
        for sheet in book.worksheets:
            sheet.reset_dimensions()  # trust only the cells present, not the sheet's declared size
            rows: list[tuple[int, list[str]]] = []
            for number, values in enumerate(sheet.iter_rows(values_only=True), start=1):
                cells += len(values)
                if cells > MAX_CELLS:
                    raise ParseError(f"xlsx refused: more than {MAX_CELLS} cells")
                line = [_cell(v) for v in values]
                while line and not line[-1]:
                    line.pop()
                if line:
                    rows.append((number, line))
            if not rows:
                continue
            used = sorted({i for _, line in rows for i, v in enumerate(line) if v})  # empty columns dropped
            lines = [_join([line[i] if i < len(line) else "" for i in used]) for _, line in rows]
            block = f"{sheet.title}\n\n"
            header, body = lines[0], "\n".join(lines[1:])
            start = size + len(block) + len(header) + 1
            offsets, at = [], 0
            for (number, _), text in zip(rows[1:], lines[1:], strict=True):
                offsets.append((number, at))
                at += len(text) + 1
            block += f"{header}\n{body}\n\n" if body else f"{header}\n\n"
            parts.append(block)
            size += len(block)
            where = {"sheet": sheet.title}
            if offsets:
                table = Table(header, tuple(offsets))
                sections.append(Section(body, start, (sheet.title,), location=where, table=table))
            else:
                sections.append(Section(header, start - len(header) - 1, (sheet.title,), location=where))
        sheets = len(book.worksheets)
        title = book.properties.title
    finally:
        book.close()
    meta: dict[str, Any] = {"sheets": sheets}
    if title:
        meta["title"] = title
    return ParsedDocument(doc_id=name, sections=sections, metadata=meta, full_text="".join(parts))


def _join(cells: list[str]) -> str:
    while cells and not cells[-1]:
        cells.pop()
    return " | ".join(cells)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else format(value, ".15g")
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return " ".join(str(value).split())
