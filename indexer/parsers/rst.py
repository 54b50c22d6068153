"""reStructuredText → sections under their heading paths, found by docutils (the reference parser), so a
title's level follows the document's own adornment order and ``#`` lines inside literal blocks are no
headings. Sections are slices of the source, as for Markdown.

docutils runs with file insertion and ``raw`` off (``.. include:: /etc/passwd`` reads nothing) and its
reports silenced: markup errors are the author's, not a reason to refuse the file.
"""

from __future__ import annotations

from indexer.documents import ParsedDocument
from indexer.parsers.sections import Heading, split_at_headings

SETTINGS = {
    "file_insertion_enabled": False, "raw_enabled": False, "report_level": 5, "halt_level": 5,
    "warning_stream": False, "doctitle_xform": False, "syntax_highlight": "none", "_disable_config": True,
    "input_encoding": "unicode",
}


def parse(name: str, text: str) -> ParsedDocument:
    from docutils import nodes
    from docutils.core import publish_doctree

    lines = text.splitlines()
    heads: list[Heading] = []
    tree = publish_doctree(text, source_path=name, settings_overrides=SETTINGS)
    for section in tree.findall(nodes.section):
        title = section[0]
        if not isinstance(title, nodes.title) or title.line is None:
            continue
        underline = title.line - 1  # docutils gives the 1-based line of the underline
        start = underline - 1
        if start > 0 and _adornment(lines[start - 1]):
            start -= 1  # an overline
        level, parent = 1, section.parent
        while isinstance(parent, nodes.section):
            level, parent = level + 1, parent.parent
        heads.append(Heading(start, underline + 1, level, title.astext().strip()))
    sections = split_at_headings(text, sorted(heads))
    meta = {"title": sections[0].headings[0]} if sections and sections[0].headings else {}
    return ParsedDocument(doc_id=name, sections=sections, metadata=meta, full_text=text)


def _adornment(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= 2 and len(set(stripped)) == 1 and not stripped[0].isalnum()
