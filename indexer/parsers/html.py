"""HTML → main text (trafilatura drops navigation, footers and boilerplate) as Markdown, then sections by
heading like Markdown files. Offsets point into the extracted text, which is what is stored and cited."""

from __future__ import annotations

from indexer.documents import ParsedDocument
from indexer.parsers.markdown import heading_sections


def parse(name: str, html: str) -> ParsedDocument:
    import trafilatura

    extracted = trafilatura.extract(
        html, output_format="markdown", include_comments=False, include_tables=True, favor_precision=True,
        with_metadata=False,
    ) or ""
    meta = trafilatura.extract_metadata(html)
    title = meta.title if meta is not None and meta.title else None
    return ParsedDocument(doc_id=name, sections=heading_sections(extracted),
                          metadata={"title": title} if title else {}, full_text=extracted)
