"""HTML → main text (trafilatura drops navigation, footers and boilerplate) as Markdown, then sections by
heading like Markdown files. Offsets point into the extracted text, which is what is stored and cited.

lxml's HTML parser expands no entities but HTML's own and reads no external ones, but HTML has no DTD
internal subset at all: a document that declares one (``<!DOCTYPE html [<!ENTITY ...>]>``) is an XML
entity bomb or an external-entity probe dressed as HTML, and is refused, as Office parts with a DTD are."""

from __future__ import annotations

import re

from indexer.documents import ParsedDocument
from indexer.parsers.errors import ParseError
from indexer.parsers.markdown import heading_sections

INTERNAL_SUBSET = re.compile(r"<!DOCTYPE[^>\[]*\[", re.IGNORECASE)


def parse(name: str, html: str) -> ParsedDocument:
    import trafilatura

    if INTERNAL_SUBSET.search(html, 0, 65536) or "<!ENTITY" in html[:65536].upper():
        raise ParseError("html refused: it declares a DTD internal subset or entities (an entity bomb or an "
                         "external entity); HTML has none")
    extracted = trafilatura.extract(
        html, output_format="markdown", include_comments=False, include_tables=True, favor_precision=True,
        with_metadata=False,
    ) or ""
    meta = trafilatura.extract_metadata(html)
    title = meta.title if meta is not None and meta.title else None
    return ParsedDocument(doc_id=name, sections=heading_sections(extracted),
                          metadata={"title": title} if title else {}, full_text=extracted)
