"""Sections under heading paths, two ways: cut out of a source text at its headings (Markdown, reST), or
built block by block from a converted document (Word, PowerPoint), where the built text is what offsets
point into.

A document that is only headings (no body anywhere) still has its headings indexed: each becomes a
section of its own title text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from indexer.documents import Section


class Heading(NamedTuple):
    start_line: int
    """Line where the heading starts (its overline, if any)."""
    body_line: int
    """Line where the text under it starts."""
    level: int
    title: str


def split_at_headings(text: str, heads: Sequence[Heading]) -> list[Section]:
    """Slices of ``text`` between headings (0-based lines), each under its heading path."""
    lines = text.splitlines(keepends=True)
    line_starts = [0]
    for line in lines:
        line_starts.append(line_starts[-1] + len(line))
    sections: list[Section] = []
    path: list[tuple[int, str]] = []

    def add(start_line: int, end_line: int) -> None:
        start, end = line_starts[min(start_line, len(lines))], line_starts[min(end_line, len(lines))]
        body = text[start:end]
        if body.strip():
            sections.append(Section(body, start, tuple(t for _, t in path)))

    add(0, heads[0].start_line if heads else len(lines))
    for n, head in enumerate(heads):
        while path and path[-1][0] >= head.level:
            path.pop()
        path.append((head.level, head.title))
        next_start = heads[n + 1].start_line if n + 1 < len(heads) else len(lines)
        add(head.body_line, next_start)
    if not sections:  # only headings: each one is its own section
        path.clear()
        for head in heads:
            while path and path[-1][0] >= head.level:
                path.pop()
            path.append((head.level, head.title))
            start, end = line_starts[head.start_line], line_starts[min(head.body_line, len(lines))]
            found = text.find(head.title, start, end)
            if found >= 0:
                start, end = found, found + len(head.title)
            sections.append(Section(text[start:end], start, tuple(t for _, t in path)))
    return sections


class SectionBuilder:
    """A document's full text and its sections, built as blocks arrive: a heading closes the section before
    it and opens one under the new heading path; :meth:`move` (a new page or slide) closes it too."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._size = 0
        self._path: list[tuple[int, str]] = []
        self._start = 0
        self._body: list[str] = []
        self._page: int | None = None
        self._location: Mapping[str, Any] = {}
        self._bare: list[Section] = []
        """Headings with nothing under them, indexed as sections when the document has no body at all."""
        self.sections: list[Section] = []

    def heading(self, level: int, title: str) -> None:
        title = " ".join(title.split())
        if not title:
            return
        self._close()
        while self._path and self._path[-1][0] >= level:
            self._path.pop()
        self._path.append((level, title))
        self._bare.append(Section(title, self._size, tuple(t for _, t in self._path), self._page, self._location))
        self._write(title + "\n\n", body=False)
        self._start = self._size

    def block(self, text: str) -> None:
        """A paragraph, a table row group, a text frame: kept as it is, followed by a blank line."""
        if text.strip():
            self._write(text.strip("\n") + "\n\n", body=True)

    def move(self, *, page: int | None = None, location: Mapping[str, Any] | None = None,
             clear_headings: bool = False) -> None:
        """Start a new section at ``page`` or ``location`` (a slide), under the same headings unless cleared."""
        self._close()
        self._page, self._location = page, dict(location or {})
        if clear_headings:
            self._path = []

    def build(self) -> tuple[str, list[Section]]:
        self._close()
        return "".join(self._parts), self.sections or self._bare

    @property
    def title(self) -> str | None:
        """The first heading, if any."""
        return self._bare[0].headings[-1] if self._bare else None

    def _write(self, text: str, *, body: bool) -> None:
        self._parts.append(text)
        self._size += len(text)
        if body:
            self._body.append(text)

    def _close(self) -> None:
        body = "".join(self._body)
        if body.strip():
            self.sections.append(Section(body, self._start, tuple(t for _, t in self._path), self._page,
                                         self._location))
        self._body = []
        self._start = self._size
