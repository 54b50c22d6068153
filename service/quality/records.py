"""What the log's database holds, as plain rows: a search's short record, its log row, feedback.

A search's short record is kept for every search (``RAGSERVE_QUERY_LOG__SEARCH_TTL_DAYS``) so that feedback on its
id can be checked: who searched (key id, tenant) and which hits came back. The log row is the sampled, optional
part: the query (or its HMAC), the filter, the hits' scores and the timings.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class RecordedHit:
    collection: str
    id: str
    """The chunk's id."""
    doc_id: str
    score: float
    rerank_score: float | None = None


@dataclass(frozen=True)
class SearchRecord:
    id: str
    created_at: float
    """Unix seconds."""
    key_id: str
    tenant: str | None
    """The key's tenant as ``field=value``, or None."""
    collections: tuple[str, ...]
    hits: tuple[RecordedHit, ...]
    """In the order returned."""
    mode: str = "dense"
    reranked: bool = False

    def hit(self, *, chunk_id: str | None = None, doc_id: str | None = None) -> RecordedHit | None:
        """The returned hit named by its chunk id, or the first (best) returned chunk of the document."""
        for h in self.hits:
            if (chunk_id is not None and h.id == chunk_id) or (chunk_id is None and h.doc_id == doc_id):
                return h
        return None


@dataclass(frozen=True)
class LogRow:
    search_id: str
    created_at: float
    key_id: str
    tenant: str | None
    collections: tuple[str, ...]
    query: str | None
    """None when only the HMAC is kept."""
    query_hmac: str | None
    mode: str
    reranked: bool
    filter: dict[str, Any] | None
    hits: tuple[RecordedHit, ...]
    timings_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Feedback:
    search_id: str
    key_id: str
    tenant: str | None
    collection: str
    chunk_id: str
    """The chunk rated: a rating sent for a document is its best returned chunk's."""
    doc_id: str
    rating: int
    comment: str | None
    created_at: float

    @property
    def target(self) -> str:
        """What a repeat rating replaces: the same key's rating of the same chunk."""
        return f"chunk:{self.chunk_id}"


@dataclass(frozen=True)
class LogEntry:
    """A log row with the feedback given on its search, as the log is read and exported."""

    row: LogRow
    feedback: tuple[Feedback, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self.row)
        row["collections"] = list(self.row.collections)
        row["hits"] = [asdict(h) for h in self.row.hits]
        row["feedback"] = [
            {"key_id": f.key_id, "collection": f.collection, "chunk_id": f.chunk_id, "doc_id": f.doc_id,
             "rating": f.rating, "comment": f.comment, "created_at": f.created_at}
            for f in self.feedback
        ]
        return row


def hits_json(hits: tuple[RecordedHit, ...]) -> str:
    return json.dumps([[h.collection, h.id, h.doc_id, h.score, h.rerank_score] for h in hits],
                      separators=(",", ":"))


def hits_from_json(text: str) -> tuple[RecordedHit, ...]:
    return tuple(RecordedHit(c, i, d, s, r) for c, i, d, s, r in json.loads(text))
