"""The sources a grounded answer was given, numbered as the prompt (the context of :mod:`service.context`) numbers
them, and which it cited.

Offsets come from the chunk's ``location`` as the indexer stores it (``char_start``/``char_end``,
``byte_start``/``byte_end``, ``page``, ``headings``, and ``slide``, ``sheet``, ``rows`` for Office
files and tables); documents upserted with their own offsets in
metadata (at its top level or under ``location``) keep those.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from service.context.passages import Passage

OFFSET_KEYS = ("char_start", "char_end", "byte_start", "byte_end")
PLACE_KEYS = ("slide", "sheet", "rows", "picture", "source")
_MARKER = re.compile(r"\[(\d{1,3})\]")


@dataclass
class Citation:
    number: int
    collection: str
    doc_id: str
    chunk_index: int
    id: str
    score: float
    text: str
    offsets: dict[str, int] | None = None
    page: int | None = None
    cited: bool = False
    """True when the answer refers to ``[number]``."""
    headings: list[str] | None = None
    rerank_score: float | None = None
    chunk_indexes: list[int] = field(default_factory=list)
    """The chunks the passage spans (``chunk_index`` is the first), as ``/v1/context`` reports them."""
    extra: dict[str, Any] = field(default_factory=dict)
    """More of the location, as stored: ``slide``, ``sheet``, ``rows``, ``picture``, and ``source`` (``ocr``: read by
    OCR; ``vision``: a picture's description)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "number": self.number, "collection": self.collection, "doc_id": self.doc_id,
            "chunk_index": self.chunk_index, "id": self.id, "score": self.score,
            "rerank_score": self.rerank_score, "cited": self.cited, "text": self.text,
            "chunk_indexes": self.chunk_indexes or [self.chunk_index],
        }
        if self.offsets:
            out["offsets"] = self.offsets
        if self.page is not None:
            out["page"] = self.page
        if self.headings:
            out["headings"] = self.headings
        out.update(self.extra)
        return out


def build_citations(passages: Sequence[Passage]) -> list[Citation]:
    """A citation per passage of a context (:mod:`service.context.packing`), numbered as the context numbers
    them: its text, and its offsets as the passage's location has them (a merged passage's whole run)."""
    citations: list[Citation] = []
    for p in passages:
        hit = p.first
        given = hit.metadata.get("location")  # offsets a caller put in a document's own metadata
        source = {**hit.metadata, **(given if isinstance(given, dict) else {}), **p.location()}
        offsets = {k: int(source[k]) for k in OFFSET_KEYS if isinstance(source.get(k), int)}
        page = source.get("page") if isinstance(source.get("page"), int) else None
        citations.append(Citation(
            number=p.number, collection=p.collection, doc_id=hit.doc_id, chunk_index=hit.chunk_index, id=hit.id,
            score=p.score, rerank_score=p.rerank_score, text=p.text, offsets=offsets or None, page=page,
            headings=source.get("headings") if isinstance(source.get("headings"), list) else None,
            extra={k: source[k] for k in PLACE_KEYS if source.get(k) is not None},
            chunk_indexes=p.chunk_indexes,
        ))
    return citations


def mark_cited(citations: Sequence[Citation], answer: str) -> None:
    """Set ``cited`` on every citation whose ``[number]`` appears in ``answer``."""
    numbers = {int(m) for m in _MARKER.findall(answer)}
    for c in citations:
        c.cited = c.number in numbers
