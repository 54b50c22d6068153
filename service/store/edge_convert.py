"""Between ragserve's store types and Qdrant Edge's: filters into the engine's, its points back as hit rows and
stored points."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import qdrant_edge as qe

from service.store.types import (
    DENSE,
    SPARSE,
    Filter,
    HasId,
    HitRow,
    IsEmpty,
    Match,
    MatchAny,
    Range,
    SparseVector,
    StoredPoint,
    hit_row,
)


def _rows(points: Sequence[qe.ScoredPoint]) -> list[HitRow]:
    return [hit_row(p.id, p.score, p.payload) for p in points]


def _stored(record: Any) -> StoredPoint:
    vectors = record.vector or {}
    sparse = vectors.get(SPARSE)
    return StoredPoint(str(record.id), dict(record.payload or {}), vectors[DENSE],
                       SparseVector(list(sparse.indices), list(sparse.values)) if sparse is not None else None)


def to_edge(flt: Filter) -> qe.Filter:
    def cond(c: Any) -> Any:
        if isinstance(c, Filter):
            return to_edge(c)
        if isinstance(c, Match):
            # The 0.9 binding tries int before bool, so a Python bool would match the integer 1, never a bool
            # payload; numpy's bool is not an integer and lands on the bool variant.
            value = np.bool_(c.value) if isinstance(c.value, bool) else c.value
            return qe.FieldCondition(key=c.key, match=qe.MatchValue(value))
        if isinstance(c, MatchAny):
            return qe.FieldCondition(key=c.key, match=qe.MatchAny(list(c.values)))
        if isinstance(c, Range):
            return qe.FieldCondition(key=c.key, range=qe.RangeFloat(gt=c.gt, gte=c.gte, lt=c.lt, lte=c.lte))
        if isinstance(c, IsEmpty):
            return qe.IsEmptyCondition(c.key)
        if isinstance(c, HasId):
            return qe.HasIdCondition(set(c.ids))
        raise TypeError(f"not a filter condition: {c!r}")

    return qe.Filter(
        must=[cond(c) for c in flt.must] or None,
        must_not=[cond(c) for c in flt.must_not] or None,
        should=[cond(c) for c in flt.should] or None,
    )
