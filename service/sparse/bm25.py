"""BM25 as Qdrant sparse vectors.

A document's vector holds, per term, BM25's saturated term frequency
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))``; a query's vector holds 1 per distinct term.
The inverse document frequency is *not* baked in: the collection's sparse vector is created with Qdrant's
``IDF`` modifier, so Qdrant computes IDF from its live document frequencies at query time and the scores
stay right as documents are added, changed and deleted. The dot product of the two is BM25.

Terms are hashed to 31-bit indices (CRC32): collisions are rare and only merge two terms' weights.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from functools import lru_cache

from service.sparse.config import SparseConfig
from service.sparse.stopwords import STOPWORDS
from service.store.types import SparseVector

__all__ = ["Bm25Encoder", "SparseConfig"]

TOKEN_RE = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)


@lru_cache(maxsize=8)
def _stemmer(language: str):  # type: ignore[no-untyped-def]
    import Stemmer

    return Stemmer.Stemmer(language)


class Bm25Encoder:
    def __init__(self, config: SparseConfig) -> None:
        self.config = config
        self._stem = _stemmer(config.language).stemWords if config.stemming else None

    def terms(self, text: str) -> list[str]:
        cfg = self.config
        words = TOKEN_RE.findall(text.lower() if cfg.lowercase else text)
        if cfg.stopwords:
            words = [w for w in words if w.lower() not in STOPWORDS]
        if self._stem is not None:
            words = self._stem(words)
        return words

    def encode_document(self, text: str) -> SparseVector:
        cfg = self.config
        counts = Counter(self.terms(text))
        length = sum(counts.values())
        norm = cfg.k1 * (1 - cfg.b + cfg.b * length / cfg.avg_len)
        weights: dict[int, float] = {}
        for term, tf in counts.items():
            index = _index(term)
            weights[index] = weights.get(index, 0.0) + tf * (cfg.k1 + 1) / (tf + norm)
        return SparseVector(indices=list(weights), values=list(weights.values()))

    def encode_query(self, text: str) -> SparseVector:
        indices = sorted({_index(t) for t in self.terms(text)})
        return SparseVector(indices=indices, values=[1.0] * len(indices))


def _index(term: str) -> int:
    return zlib.crc32(term.encode("utf-8")) & 0x7FFFFFFF
