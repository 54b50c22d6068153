"""PowerPoint (.pptx) → one section per slide (python-pptx), under the slide's title, with ``slide`` (1-based)
in the location.

A slide's text is its title, then every other shape's text in the order the slide lists them (groups
opened, tables one line per row with cells joined by `` | ``), then its speaker notes. Pictures and charts
carry no text layer and are left out.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import Any

from indexer.documents import ParsedDocument
from indexer.parsers.ooxml import check_package
from indexer.parsers.sections import SectionBuilder


def parse(name: str, data: bytes) -> ParsedDocument:
    from pptx import Presentation

    check_package(data, "pptx")
    deck = Presentation(io.BytesIO(data))
    out = SectionBuilder()
    count = 0
    for number, slide in enumerate(deck.slides, start=1):
        count = number
        out.move(location={"slide": number}, clear_headings=True)
        title = slide.shapes.title
        if title is not None and title.has_text_frame and title.text_frame.text.strip():
            out.heading(1, title.text_frame.text)
        for shape in walk_shapes(slide.shapes):
            if title is not None and shape.shape_id == title.shape_id:
                continue
            out.block(_shape_text(shape))
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                out.block(_lines(notes.text))
    full_text, sections = out.build()
    meta: dict[str, Any] = {"slides": count}
    title_text = deck.core_properties.title or out.title
    if title_text:
        meta["title"] = title_text
    return ParsedDocument(doc_id=name, sections=sections, metadata=meta, full_text=full_text)


def walk_shapes(shapes: Iterable[Any]) -> Iterator[Any]:
    """Every shape of a slide, groups opened, in the order the slide lists them (also :mod:`indexer.pictures`)."""
    for shape in shapes:
        if hasattr(shape, "shapes"):  # a group: its members, in order
            yield from walk_shapes(shape.shapes)
        else:
            yield shape


def _shape_text(shape: Any) -> str:
    if getattr(shape, "has_table", False):
        rows = (" | ".join(" ".join(cell.text.split()) for cell in row.cells) for row in shape.table.rows)
        return "\n".join(r for r in rows if r.strip(" |"))
    if getattr(shape, "has_text_frame", False):
        return _lines(shape.text_frame.text)
    return ""


def _lines(text: str) -> str:
    return text.replace("\x0b", "\n")  # python-pptx writes a line break inside a paragraph as a vertical tab
