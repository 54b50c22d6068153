"""BM25 as Qdrant sparse vectors.

A document's vector holds, per term, BM25's saturated term frequency
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))``; a query's vector holds 1 per distinct term.
The inverse document frequency is *not* baked in: the collection's sparse vector is created with Qdrant's
``IDF`` modifier, so Qdrant computes IDF from its live document frequencies at query time and the scores
stay right as documents are added, changed and deleted. The dot product of the two is BM25.

Analysis (tokenizing, lower-casing, stop-words, stemming, term ids) is the engine's own by default:
``qdrant_edge.Bm25``, whose config is the Qdrant server's ``Bm25Config``, so the embedded engine and a
server index the same terms (docs/bm25.md: as good as ragserve's earlier analyzer on SciFact, 2.6x faster).
The engine computes term frequencies only; the weights are computed here, with the collection's own
``avg_len`` (see ``service.documents.normalisation``). ragserve's earlier analyzer (regex + PyStemmer, CRC32 term
ids) stays for collections written with it.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from functools import lru_cache

import qdrant_edge as qe

from service.sparse.config import LEGACY_ENCODER, SparseConfig
from service.sparse.stopwords import STOPWORDS
from service.sparse.vector import SparseVector

__all__ = ["Bm25Encoder", "SparseConfig"]

TOKEN_RE = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
TermFrequencies = dict[int, int]


@lru_cache(maxsize=8)
def _stemmer(language: str):  # type: ignore[no-untyped-def]
    import Stemmer

    return Stemmer.Stemmer(language)


class Bm25Encoder:
    def __init__(self, config: SparseConfig) -> None:
        self.config = config
        if config.encoder == LEGACY_ENCODER:
            self._stem = _stemmer(config.language).stemWords if config.stemming else None
            self._engine = None
        else:
            # k=1, b=0 makes the engine's weight 2·tf/(tf+1), which gives tf back exactly (see frequencies)
            options: dict[str, object] = {"k": 1.0, "b": 0.0, "avg_len": 1.0, "language": config.language,
                                          "lowercase": config.lowercase}
            if not config.stemming:
                options["stemmer"] = qe.DisabledStemmer()
            if not config.stopwords:
                options["stopwords"] = qe.StopwordsSet()
            self._engine = qe.Bm25(qe.Bm25Config(**options))

    def terms(self, text: str) -> list[str]:
        """ragserve's own analysis (the legacy encoder): the terms of ``text``, in order."""
        cfg = self.config
        words = TOKEN_RE.findall(text.lower() if cfg.lowercase else text)
        if cfg.stopwords:
            words = [w for w in words if w.lower() not in STOPWORDS]
        if self._stem is not None:
            words = self._stem(words)
        return words

    def frequencies(self, text: str) -> TermFrequencies:
        """Term id → occurrences in ``text``; their sum is the document's length in terms."""
        if self._engine is None:
            return dict(Counter(_index(t) for t in self.terms(text)))
        vec = self._engine.embed_document(text)
        return {i: round(w / (2.0 - w)) for i, w in zip(vec.indices, vec.values, strict=True)}

    def weights(self, tf: TermFrequencies, avg_len: float) -> SparseVector:
        cfg = self.config
        length = sum(tf.values())
        norm = cfg.k1 * (1 - cfg.b + cfg.b * length / avg_len)
        indices = sorted(tf)
        return SparseVector(indices, [tf[i] * (cfg.k1 + 1) / (tf[i] + norm) for i in indices])

    def encode_document(self, text: str, avg_len: float | None = None) -> SparseVector:
        avg = avg_len or self.config.avg_len
        if avg is None:
            raise ValueError("avg_len is not known yet (service.documents.normalisation sets it)")
        return self.weights(self.frequencies(text), avg)

    def encode_query(self, text: str) -> SparseVector:
        if self._engine is None:
            indices = sorted({_index(t) for t in self.terms(text)})
        else:
            indices = sorted(self._engine.embed_query(text).indices)
        return SparseVector(indices, [1.0] * len(indices))


def _index(term: str) -> int:
    return zlib.crc32(term.encode("utf-8")) & 0x7FFFFFFF


@lru_cache(maxsize=64)
def encoder_for(config_json: str) -> Bm25Encoder:
    return Bm25Encoder(SparseConfig.model_validate_json(config_json))


def encoder(config: SparseConfig) -> Bm25Encoder:
    """The encoder of a collection's analysis settings (built once per settings; ``avg_len`` aside)."""
    return encoder_for(config.model_copy(update={"avg_len": None}).model_dump_json())
