"""The sources a grounded answer was given, numbered as the prompt numbers them, and which it cited.

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

from service.generation.prompts import ContextPassage
from service.search.service import RankedHit

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
    extra: dict[str, Any] = field(default_factory=dict)
    """More of the location, as stored: ``slide``, ``sheet``, ``rows``, ``picture``, and ``source`` (``ocr``: read by
    OCR; ``vision``: a picture's description)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "number": self.number, "collection": self.collection, "doc_id": self.doc_id,
            "chunk_index": self.chunk_index, "id": self.id, "score": self.score,
            "rerank_score": self.rerank_score, "cited": self.cited, "text": self.text,
        }
        if self.offsets:
            out["offsets"] = self.offsets
        if self.page is not None:
            out["page"] = self.page
        if self.headings:
            out["headings"] = self.headings
        out.update(self.extra)
        return out


def build_citations(
    ranked: Sequence[tuple[str, RankedHit]], *, max_chars: int
) -> tuple[list[Citation], list[ContextPassage]]:
    """Number the hits 1..n in rank order, within a budget of ``max_chars`` of context text.

    A passage that crosses the budget is cut; those after it are left out (and are not cited).
    """
    citations: list[Citation] = []
    passages: list[ContextPassage] = []
    left = max_chars
    for collection, ranked_hit in ranked:
        if left <= 0:
            break
        hit = ranked_hit.hit
        text = hit.text[:left]
        left -= len(text)
        number = len(citations) + 1
        given = hit.metadata.get("location")  # offsets a caller put in a document's own metadata
        source = {**hit.metadata, **(given if isinstance(given, dict) else {}), **(hit.location or {})}
        offsets = {k: int(source[k]) for k in OFFSET_KEYS if isinstance(source.get(k), int)}
        page = source.get("page") if isinstance(source.get("page"), int) else None
        citations.append(Citation(
            number=number, collection=collection, doc_id=hit.doc_id, chunk_index=hit.chunk_index, id=hit.id,
            score=ranked_hit.score, rerank_score=ranked_hit.rerank_score, text=text, offsets=offsets or None,
            page=page, headings=source.get("headings") if isinstance(source.get("headings"), list) else None,
            extra={k: source[k] for k in PLACE_KEYS if source.get(k) is not None},
        ))
        passages.append(ContextPassage(number, text))
    return citations, passages


def mark_cited(citations: Sequence[Citation], answer: str) -> None:
    """Set ``cited`` on every citation whose ``[number]`` appears in ``answer``."""
    numbers = {int(m) for m in _MARKER.findall(answer)}
    for c in citations:
        c.cited = c.number in numbers
