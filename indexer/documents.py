"""Domain types of the indexer."""

from __future__ import annotations

from collections.abc import Mapping
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
class Table:
    """The rows of a table section (a CSV file, a sheet): chunks take whole rows, with the header above them."""

    header: str
    """The header line, repeated at the top of every chunk."""
    rows: tuple[tuple[int, int], ...]
    """(row number as the file or sheet numbers it, offset in the section's text where the row starts)."""


@dataclass(frozen=True)
class Section:
    """A run of text under one heading path (or on one PDF page, one slide, one sheet)."""

    text: str
    char_start: int
    """Offset of ``text`` in the document's full text."""
    headings: tuple[str, ...] = ()
    page: int | None = None
    location: Mapping[str, Any] = field(default_factory=dict)
    """More of the location, copied to every chunk of the section (``slide``, ``sheet``)."""
    table: Table | None = None


@dataclass(frozen=True)
class ImageRegion:
    """A picture in a document (an image file's page, a scanned PDF page): what OCR read is in the sections.
    An image file's regions are what the describer (:mod:`indexer.vision`) describes; a scanned PDF page's are
    not described (OCR read the page; it is skipped when embedded pictures are described)."""

    page: int | None
    """1-based page (a PDF page, a TIFF page); None for a single image."""
    width: int
    """Pixels (an image) or points (a PDF page)."""
    height: int


@dataclass(frozen=True)
class ParsedDocument:
    doc_id: str
    sections: list[Section]
    metadata: dict[str, Any] = field(default_factory=dict)
    full_text: str = ""
    """The text that offsets point into (sections are slices of it)."""
    chunk: bool = True
    """False when the record is already a passage (JSONL): one chunk, cut at the model's window."""
    images: tuple[ImageRegion, ...] = ()
    """Pictures whose text was read by OCR (image files, scanned PDF pages)."""


@dataclass(frozen=True)
class FileError:
    file: str
    error: str


@dataclass(frozen=True)
class FileWarning:
    """Something of a file that was left out while the file itself was indexed (a picture not described)."""

    file: str
    warning: str
