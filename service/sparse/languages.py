"""The languages each BM25 encoder can analyse, asked of the libraries themselves.

A collection created with a language its encoder lacks would refuse every document written to it, so
the language is checked when the collection is created.
"""

from __future__ import annotations

from functools import lru_cache

from service.sparse.config import LEGACY_ENCODER


@lru_cache(maxsize=1)
def qdrant_languages() -> tuple[str, ...]:
    """Languages ``qdrant_edge.Bm25`` accepts: its stop-word and stemmer enums' members, each tried."""
    import qdrant_edge as qe

    names = {n.lower() for enum in (qe.Language, qe.SnowballLanguage) for n in dir(enum) if not n.startswith("_")}
    accepted = []
    for name in sorted(names):
        try:
            qe.Bm25(qe.Bm25Config(language=name))
        except ValueError:
            continue
        accepted.append(name)
    return tuple(accepted)


@lru_cache(maxsize=1)
def legacy_languages() -> tuple[str, ...]:
    """Languages of ragserve's earlier encoder: PyStemmer's algorithms."""
    import Stemmer

    return tuple(sorted(Stemmer.algorithms()))


def languages(encoder: str) -> tuple[str, ...]:
    return legacy_languages() if encoder == LEGACY_ENCODER else qdrant_languages()


def language_problem(encoder: str, language: str) -> str | None:
    if language in languages(encoder):
        return None
    return f"the {encoder} encoder does not support language {language!r}; it supports {', '.join(languages(encoder))}"
