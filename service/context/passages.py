"""Passages: chunks of one document put back together by their offsets.

A chunk the indexer cut from its document's text (a window of a section) is a slice of that text: its
``location`` holds ``char_start``/``char_end`` and its text is exactly those characters. Chunks of one section
whose character ranges overlap or touch become one passage whose text is the source between the first start
and the last end, built from the chunk texts by their offsets, so the overlap is counted once and nothing is
glued twice. A table chunk (a header above rows), an OCR chunk and a picture's description are not slices, so
they never merge and keep their own location; neither does a chunk whose text is not as long as its range
(a document upserted with offsets of its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from service.store.types import Hit

SECTION_KEYS = ("headings", "page", "slide", "sheet")
UNSLICED_SOURCES = ("ocr", "vision")


@dataclass(frozen=True)
class Candidate:
    """A search hit as the assembler ranks it."""

    collection: str
    hit: Hit
    score: float
    """What candidates are ordered by: the reranker's score, or, across collections without a reranker, the
    reciprocal-rank score (:mod:`service.context.assembler`)."""
    rerank_score: float | None = None


def span(hit: Hit) -> tuple[int, int] | None:
    """The hit's character range in its document when its text is that slice of the source, else None."""
    loc = hit.location or {}
    start, end = loc.get("char_start"), loc.get("char_end")
    if not isinstance(start, int) or not isinstance(end, int) or isinstance(start, bool) or isinstance(end, bool):
        return None
    if "rows" in loc or loc.get("source") in UNSLICED_SOURCES or hit.source in UNSLICED_SOURCES:
        return None
    return (start, end) if end - start == len(hit.text) and end > start else None


def doc_key(collection: str, hit: Hit) -> tuple[str, str | None, str]:
    """One document: the same id in another collection or under another tenant is another document."""
    return (collection, hit.tenant, hit.doc_id)


def section_key(collection: str, hit: Hit) -> tuple[Any, ...]:
    loc = hit.location or {}
    return (*doc_key(collection, hit), *(repr(loc.get(k)) for k in SECTION_KEYS))


@dataclass
class Passage:
    """One passage of a context: a run of chunks of one section (or one chunk that is not a slice)."""

    collection: str
    chunks: list[Hit]
    """In document order."""
    score: float
    rerank_score: float | None
    text: str
    start: int | None
    """char_start of the run; None for a chunk that is not a slice."""
    end: int | None
    cut: bool = False
    """Cut at a sentence boundary to fit the budget."""
    tokens: int = 0
    number: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def first(self) -> Hit:
        return self.chunks[0]

    @property
    def doc(self) -> tuple[str, str | None, str]:
        return doc_key(self.collection, self.first)

    @property
    def section(self) -> tuple[Any, ...]:
        return section_key(self.collection, self.first)

    @property
    def mergeable(self) -> bool:
        return self.start is not None

    @property
    def chunk_indexes(self) -> list[int]:
        return [h.chunk_index for h in self.chunks]

    def reported(self) -> dict[str, Any]:
        """The passage as ``/v1/context`` reports it (REST and MCP take the fields they show)."""
        return {
            "number": self.number, "collection": self.collection, "doc_id": self.first.doc_id,
            "chunk_indexes": self.chunk_indexes, "text": self.text, "location": self.location() or None,
            "metadata": self.first.metadata, "score": self.score, "rerank_score": self.rerank_score,
            "tokens": self.tokens, "cut": self.cut,
        }

    def location(self) -> dict[str, Any]:
        """Where the passage sits in its document: its chunks' location with the offsets of the whole run."""
        loc = dict(self.first.location or {})
        first_span = span(self.first)
        if self.start is not None and self.end is not None and first_span is not None:
            byte_start = loc.get("byte_start")
            loc["char_start"], loc["char_end"] = self.start, self.end
            if isinstance(byte_start, int):  # a passage trimmed at its head starts inside its first chunk
                byte_start += len(self.first.text[:self.start - first_span[0]].encode("utf-8"))
                loc["byte_start"] = byte_start
                loc["byte_end"] = byte_start + len(self.text.encode("utf-8"))
        return loc

    def render_values(self, number: int) -> dict[str, str]:
        hit = self.first
        title = hit.metadata.get("title")
        page = (hit.location or {}).get("page")
        return {
            "number": str(number),
            "title": str(title) if isinstance(title, str) and title.strip() else hit.doc_id,
            "source": hit.source or hit.doc_id,
            "page": str(page) if isinstance(page, int) else "",
            "text": self.text,
        }


def single(candidate: Candidate) -> Passage:
    hit = candidate.hit
    s = span(hit)
    return Passage(candidate.collection, [hit], candidate.score, candidate.rerank_score, hit.text,
                   None if s is None else s[0], None if s is None else s[1])


def joined(chunks: Sequence[Hit]) -> tuple[str, int, int] | None:
    """The source text covered by ``chunks`` (slices of one section, any order), or None when they leave a
    gap or one is not a slice."""
    spans = []
    for hit in chunks:
        s = span(hit)
        if s is None:
            return None
        spans.append((s[0], s[1], hit.text))
    spans.sort()
    start, end = spans[0][0], spans[0][1]
    text = spans[0][2]
    for a, b, t in spans[1:]:
        if a > end:
            return None
        if b > end:
            text += t[end - a:]
            end = b
    return text, start, end


def overlaps(p: Passage, q: Passage) -> bool:
    """Both are slices of one section whose ranges overlap or touch."""
    return (p.mergeable and q.mergeable and p.section == q.section and p.start is not None and p.end is not None
            and q.start is not None and q.end is not None and p.start <= q.end and q.start <= p.end)


def merge(p: Passage, q: Passage) -> Passage:
    """One passage of two that :func:`overlaps` says meet; the better score and rerank score."""
    by_index = {h.chunk_index: h for h in [*p.chunks, *q.chunks]}
    chunks = sorted(by_index.values(), key=lambda h: (span(h) or (0, 0))[0])
    made = joined(chunks)
    assert made is not None, "merge() takes passages that overlaps() says meet"
    text, start, end = made
    rerank = [s for s in (p.rerank_score, q.rerank_score) if s is not None]
    return Passage(p.collection, chunks, max(p.score, q.score), max(rerank) if rerank else None, text, start, end)


def covers(p: Passage, hit: Hit) -> bool:
    """The passage already holds this chunk."""
    return any(h.chunk_index == hit.chunk_index for h in p.chunks)
