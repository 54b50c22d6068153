"""Markdown → sections under their heading paths (``("Install", "On a GPU")``)."""

from __future__ import annotations

from markdown_it import MarkdownIt

from indexer.documents import ParsedDocument, Section


def heading_sections(text: str) -> list[Section]:
    lines = text.splitlines(keepends=True)
    line_starts = [0]
    for line in lines:
        line_starts.append(line_starts[-1] + len(line))
    tokens = MarkdownIt("commonmark").parse(text)
    # (line where the heading starts, line where its body starts, level, title)
    heads: list[tuple[int, int, int, str]] = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map:
            title = tokens[i + 1].content.strip()
            heads.append((tok.map[0], tok.map[1], int(tok.tag[1]), title))
    sections: list[Section] = []
    path: list[tuple[int, str]] = []

    def add(start_line: int, end_line: int) -> None:
        start, end = line_starts[start_line], line_starts[min(end_line, len(lines))]
        body = text[start:end]
        if body.strip():
            sections.append(Section(body, start, tuple(t for _, t in path)))

    add(0, heads[0][0] if heads else len(lines))
    for n, (_, body_start, level, title) in enumerate(heads):
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title))
        next_start = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
        add(body_start, next_start)
    return sections


def parse(name: str, text: str) -> ParsedDocument:
    sections = heading_sections(text)
    meta = {"title": sections[0].headings[0]} if sections and sections[0].headings else {}
    return ParsedDocument(doc_id=name, sections=sections, metadata=meta, full_text=text)
