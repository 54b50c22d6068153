"""Markdown → sections under their heading paths (``("Install", "On a GPU")``)."""

from __future__ import annotations

from markdown_it import MarkdownIt

from indexer.documents import ParsedDocument, Section
from indexer.parsers.sections import Heading, split_at_headings


def heading_sections(text: str) -> list[Section]:
    tokens = MarkdownIt("commonmark").parse(text)
    heads = [
        Heading(tok.map[0], tok.map[1], int(tok.tag[1]), tokens[i + 1].content.strip())
        for i, tok in enumerate(tokens) if tok.type == "heading_open" and tok.map
    ]
    return split_at_headings(text, heads)


def parse(name: str, text: str) -> ParsedDocument:
    sections = heading_sections(text)
    meta = {"title": sections[0].headings[0]} if sections and sections[0].headings else {}
    return ParsedDocument(doc_id=name, sections=sections, metadata=meta, full_text=text)
