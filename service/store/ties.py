"""One order for ranked hits: score descending, then point id ascending (the id's string, compared as text).

The engine orders exactly tied scores by where the points happen to sit (segment, offset) and, for a fused
query, by a hash map's iteration order, so the same query can come back in another order from one call to
the next, and a collection and its imported copy (another segment layout) disagree. RRF ties often: a hit
ranked r by dense alone scores the same as one ranked r by BM25 alone. The point id is stable where the
engine's layout is not (it is derived from the collection's name, the document and the chunk index), so it
settles ties.

A tie across the cut is settled inside the engine: which of the tied points make the first ``limit`` is the
engine's choice. So :func:`settled` asks for more than ``limit``, and again for more while the tied group at the
cut runs to the end of what came back, then sorts by (score, id) and cuts. A tie group larger than
:data:`MAX_EXTRA` is cut where the engine cut it: the points returned are then sorted, but which of the tied
points they are is still the engine's choice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from service.store.types import Hit

FIRST_EXTRA = 32
"""Hits asked for beyond the limit at first: enough for the tie groups RRF and BM25 make, so that a tie at the cut
rarely costs a second engine call."""
MAX_EXTRA = 1024
"""The most hits asked for beyond the limit, however far a tie group runs (the bound on the engine calls: the
extra grows fourfold per call, so at most four)."""


def order(hit: Hit) -> tuple[float, str]:
    return -hit.score, hit.id


async def settled(fetch: Callable[[int], Awaitable[list[Hit]]], limit: int) -> list[Hit]:
    """The first ``limit`` hits in :func:`order`, from ``fetch(n)``: the engine's best ``n`` hits, in any order."""
    if limit < 1:
        return await fetch(limit)
    extra = FIRST_EXTRA
    while True:
        asked = limit + extra
        hits = sorted(await fetch(asked), key=order)
        if len(hits) < asked or extra >= MAX_EXTRA or not _tie_runs_past(hits, limit):
            return hits[:limit]
        extra = min(extra * 4, MAX_EXTRA)


def _tie_runs_past(hits: list[Hit], limit: int) -> bool:
    """Whether the score at the cut is also the last score fetched: points tied with it may lie beyond."""
    return len(hits) > limit and hits[-1].score == hits[limit - 1].score
