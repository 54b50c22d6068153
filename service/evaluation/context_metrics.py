"""What a token-budgeted context is worth to a chat app, and the plain packing it is measured against.

Engine-free: contexts come in as :class:`Packed` values, whoever built them (``POST /v1/context``, or
:func:`plain_pack` over ``/v1/search`` hits), and tokens are counted by the caller's ``count``. On a set built by
:mod:`service.evaluation.copies`, a copy counts as its original (``copies`` maps one to the other), so a context
holding both gains nothing from the second and pays its tokens as repeated text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import mean

Qrels = Mapping[str, Mapping[str, int]]

SHINGLE = 5
"""Word n-gram length for repeated text: long enough that shared phrases between distinct abstracts rarely match,
short enough that a copy with a word dropped here and there still matches almost everywhere."""

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class PackedPassage:
    doc_id: str
    text: str
    """The chunk's text, as retrieved (without the numbering and citation the context renders around it)."""
    tokens: int
    """Its cost in the context: the tokens of its rendered form."""


@dataclass(frozen=True)
class Packed:
    """One query's context: its passages in context order and the token count of the whole rendered context."""

    passages: list[PackedPassage]
    tokens: int
    dropped_duplicates: list[str] = field(default_factory=list)
    """Doc ids of candidates left out as duplicates of a passage (one entry per candidate chunk)."""


def plain_pack(
    hits: Sequence[tuple[str, str]], *, budget: int, render: Callable[[int, str, str], str],
    count: Callable[[str], int], separator: str = "\n\n",
) -> Packed:
    """The baseline: ``(doc_id, chunk_text)`` hits in rank order, each rendered as ``render(number, doc_id,
    text)`` and joined with ``separator``, until the next one would take the joined context past ``budget``.

    It stops at that hit rather than skipping to a shorter one, as a chat app that fills its prompt from the top
    does; nothing is dropped as a duplicate. The whole context is counted at each step, since a tokenizer need
    not count a join as the sum of its parts.
    """
    rendered: list[str] = []
    passages: list[PackedPassage] = []
    for number, (doc_id, text) in enumerate(hits, start=1):
        block = render(number, doc_id, text)
        if count(separator.join([*rendered, block])) > budget:
            break
        rendered.append(block)
        passages.append(PackedPassage(doc_id, text, count(block)))
    return Packed(passages, count(separator.join(rendered)))


def repeated_tokens(passages: Sequence[PackedPassage]) -> int:
    """Tokens a context spends on text it already holds.

    Walking the passages in context order, a passage's words (lowercased ``\\w+``) covered by a word 5-gram seen
    in an earlier passage (of any document) are repeated; the passage adds that share of its tokens, rounded.
    Catches copies of a document and the overlap of neighbouring chunks of one alike.
    """
    seen: set[tuple[str, ...]] = set()
    total = 0
    for passage in passages:
        words = _WORD.findall(passage.text.lower())
        grams = [tuple(words[i : i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)]
        covered: set[int] = set()
        for start, gram in enumerate(grams):
            if gram in seen:
                covered.update(range(start, start + SHINGLE))
        if words:
            total += round(len(covered) / len(words) * passage.tokens)
        seen.update(grams)
    return total


def context_report(
    per_query: Mapping[str, Packed], qrels: Qrels, copies: Mapping[str, str], budget: int,
) -> dict[str, float]:
    """Means over the queries of ``qrels`` that have a context (totals for the two drop counts).

    - ``distinct_relevant_per_query``: relevant documents (qrels score > 0) in the context, a copy counting as
      its original and a document once however many passages it has; ``relevant_recall``: that over the
      query's relevant documents (0 for a query with none).
    - ``tokens_used`` and ``tokens_used_share`` (of ``budget``); ``repeated_tokens`` (:func:`repeated_tokens`)
      and ``repeated_share_of_budget``.
    - ``copies_dropped``: dropped candidates whose original, or copy, is a passage: true drops.
      ``wrongly_dropped``: dropped candidates whose document (as its original) has no passage: a distinct
      document taken for a copy. A chunk dropped for overlapping a passage of its own document is neither.
    """
    queries = [q for q in qrels if q in per_query]
    if not queries:
        raise ValueError("no query of the qrels has a context to score")

    def canonical(doc_id: str) -> str:
        return copies.get(doc_id, doc_id)

    found: list[int] = []
    recall: list[float] = []
    repeated: list[int] = []
    copies_dropped = wrongly_dropped = 0
    for q in queries:
        packed = per_query[q]
        relevant = {d for d, score in qrels[q].items() if score > 0}
        hits = len({canonical(p.doc_id) for p in packed.passages} & relevant)
        found.append(hits)
        recall.append(hits / len(relevant) if relevant else 0.0)
        repeated.append(repeated_tokens(packed.passages))
        held = {(canonical(p.doc_id), p.doc_id) for p in packed.passages}
        originals = {original for original, _ in held}
        for doc_id in packed.dropped_duplicates:
            original = canonical(doc_id)
            if original not in originals:
                wrongly_dropped += 1
            elif any(o == original and d != doc_id for o, d in held):
                copies_dropped += 1
    tokens = mean(per_query[q].tokens for q in queries)
    return {
        "queries": float(len(queries)),
        "distinct_relevant_per_query": mean(found),
        "relevant_recall": mean(recall),
        "tokens_used": tokens,
        "tokens_used_share": tokens / budget,
        "repeated_tokens": mean(repeated),
        "repeated_share_of_budget": mean(repeated) / budget,
        "copies_dropped": float(copies_dropped),
        "wrongly_dropped": float(wrongly_dropped),
    }


COLUMNS = {
    "queries": ("queries", "{:.0f}"),
    "distinct_relevant_per_query": ("rel/query", "{:.3f}"),
    "relevant_recall": ("recall", "{:.4f}"),
    "tokens_used": ("tokens", "{:.1f}"),
    "tokens_used_share": ("tok/budget", "{:.3f}"),
    "repeated_tokens": ("repeated", "{:.1f}"),
    "repeated_share_of_budget": ("rep/budget", "{:.3f}"),
    "copies_dropped": ("copies drop", "{:.0f}"),
    "wrongly_dropped": ("wrong drop", "{:.0f}"),
}


def format_context_table(rows: Mapping[str, Mapping[str, float]]) -> str:
    """One line per method (``{"plain": report, "context": report}``), a header first."""
    width = max([len("method"), *map(len, rows)]) + 2
    lines = [f"{'method':<{width}}" + "".join(f"{title:>13}" for title, _ in COLUMNS.values())]
    for method, report in rows.items():
        lines.append(f"{method:<{width}}" + "".join(f"{fmt.format(report[key]):>13}"
                                                   for key, (_, fmt) in COLUMNS.items()))
    return "\n".join(lines)
