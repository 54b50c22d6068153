"""PDF text layer, page by page (pypdf). Page numbers (1-based) travel with each section."""

from __future__ import annotations

import io

from indexer.documents import ParsedDocument, Section


def parse(name: str, data: bytes) -> ParsedDocument:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data), strict=False)
    sections: list[Section] = []
    parts: list[str] = []
    offset = 0
    for number, page in enumerate(reader.pages, start=1):
        text = page.extract_text() or ""
        if text.strip():
            sections.append(Section(text, offset, page=number))
        parts.append(text)
        offset += len(text) + 1  # pages joined by "\n" in full_text
    meta: dict[str, object] = {"pages": len(reader.pages)}
    title = reader.metadata.title if reader.metadata else None
    if title:
        meta["title"] = str(title)
    return ParsedDocument(doc_id=name, sections=sections, metadata=meta, full_text="\n".join(parts))
