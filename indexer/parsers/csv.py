"""CSV and TSV → one table section: the first non-empty record is the header, every chunk is whole records
under it, with ``rows`` (record numbers as a spreadsheet shows them: the header is row 1) in its location.

Offsets point into the file itself, and each record's text is its own source lines, so a quoted field that
spans lines stays whole. The delimiter is sniffed among ``, ; TAB |`` (TSV: tab).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator

from indexer.documents import ParsedDocument, Section, Table

DELIMITERS = ",;\t|"


def parse(name: str, text: str, *, delimiter: str | None = None) -> ParsedDocument:
    end = 0

    def lines() -> Iterator[str]:
        nonlocal end
        for line in text.splitlines(keepends=True):
            end += len(line)  # before the reader sees it: after each record, ``end`` is where it ends
            yield line

    dialect = _dialect(text) if delimiter is None else csv.excel
    reader = csv.reader(lines(), dialect, **({"delimiter": delimiter} if delimiter else {}))
    header: str | None = None
    first = previous_end = 0
    rows: list[tuple[int, int]] = []
    for number, record in enumerate(reader, start=1):
        start, previous_end = previous_end, end
        if not any(field.strip() for field in record):
            continue
        if header is None:
            header, first = text[start:end].strip(), end
        else:
            rows.append((number, start - first))
    if header is None:
        sections = []
    elif not rows:
        sections = [Section(header, text.index(header))]
    else:
        sections = [Section(text[first:], first, table=Table(header, tuple(rows)))]
    return ParsedDocument(doc_id=name, sections=sections, metadata={"rows": len(rows)}, full_text=text)


def _dialect(text: str) -> type[csv.Dialect]:
    sample = text[:8192]
    cut = sample.rfind("\n")
    try:
        return csv.Sniffer().sniff(sample[:cut] if cut > 0 else sample, delimiters=DELIMITERS)
    except csv.Error:
        return csv.excel
