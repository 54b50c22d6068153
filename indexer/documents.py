"""Domain types of the indexer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SourceFile:
    """One file (or fetched body) a source yields, before parsing."""

    name: str
    """Path relative to the source root, or the URL: the document id of a single-document file."""
    data: bytes
    content_type: str | None = None


@dataclass(frozen=True)
class Section:
    """A run of text under one heading path (or on one PDF page)."""

    text: str
    char_start: int
    """Offset of ``text`` in the document's full text."""
    headings: tuple[str, ...] = ()
    page: int | None = None


@dataclass(frozen=True)
class ParsedDocument:
    doc_id: str
    sections: list[Section]
    metadata: dict[str, Any] = field(default_factory=dict)
    full_text: str = ""
    """The text that offsets point into (sections are slices of it)."""
    chunk: bool = True
    """False when the record is already a passage (JSONL): one chunk, cut at the model's window."""


@dataclass(frozen=True)
class FileError:
    file: str
    error: str
