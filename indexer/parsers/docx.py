"""Word (.docx) → sections under heading paths (python-docx), with page numbers where the file has them.

Paragraphs and tables are read in document order; a paragraph whose style is ``Title`` or ``Heading N``
(or is based on one) is a heading. A table becomes one line per row, cells joined by `` | ``. Pages are
not stored in a .docx (Word lays them out when it opens the file), so ``page`` comes from the page breaks
Word recorded when it last saved (``lastRenderedPageBreak``) or, in files without those, from hard page
breaks; a file with neither has no page numbers. Headers, footers and comments are left out.
"""

from __future__ import annotations

import io
import re
from typing import Any

from indexer.documents import ParsedDocument
from indexer.parsers.ooxml import check_package
from indexer.parsers.sections import SectionBuilder

_HEADING = re.compile(r"heading ([1-9])")


def parse(name: str, data: bytes) -> ParsedDocument:
    import docx
    from docx.oxml.ns import qn
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    check_package(data, "docx")
    document = docx.Document(io.BytesIO(data))
    body = document.element.body
    rendered = bool(body.xpath(".//w:lastRenderedPageBreak"))
    paged = rendered or bool(body.xpath('.//w:br[@w:type="page"]'))
    tags = {qn("w:t"): "t", qn("w:tab"): "\t", qn("w:br"): "br", qn("w:cr"): "\n", qn("w:noBreakHyphen"): "-",
            qn("w:lastRenderedPageBreak"): "rendered"}
    out = SectionBuilder()
    page = 1
    if paged:
        out.move(page=page)
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            out.block(_table_text(block))
            continue
        assert isinstance(block, Paragraph)
        level = _heading_level(block)
        if level is not None:
            out.heading(level, block.text)
            continue
        text: list[str] = []
        for run in block._p.xpath("./w:r | ./w:hyperlink/w:r"):
            for child in run.iterchildren():
                kind = tags.get(child.tag)
                if kind == "t":
                    text.append(child.text or "")
                elif kind == "br" and child.get(qn("w:type")) == "page" or kind == "rendered":
                    if (kind == "rendered") == rendered:  # count one kind of break, never both
                        out.block("".join(text))
                        text = []
                        page += 1
                        out.move(page=page)
                elif kind == "br":
                    text.append("\n")
                elif kind is not None:
                    text.append(kind)
        out.block("".join(text))
    full_text, sections = out.build()
    meta: dict[str, Any] = {}
    title = document.core_properties.title or out.title
    if title:
        meta["title"] = title
    if paged:
        meta["pages"] = page
    return ParsedDocument(doc_id=name, sections=sections, metadata=meta, full_text=full_text)


def _heading_level(paragraph: Any) -> int | None:
    style = paragraph.style
    for _ in range(10):  # a style based on a heading style is a heading too
        if style is None:
            return None
        style_name = (style.name or "").lower()
        if style_name == "title":
            return 0
        match = _HEADING.fullmatch(style_name)
        if match:
            return int(match.group(1))
        style = style.base_style
    return None


def _table_text(table: Any) -> str:
    lines = []
    for row in table.rows:
        cells: list[str] = []
        seen: set[Any] = set()  # the cells' XML elements (a proxy stays the same object while held)
        for cell in row.cells:
            if cell._tc in seen:  # a merged cell is listed once per grid column it spans
                continue
            seen.add(cell._tc)
            cells.append(" ".join(cell.text.split()))
        if any(cells):
            lines.append(" | ".join(cells))
    return "\n".join(lines)
