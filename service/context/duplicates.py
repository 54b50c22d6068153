"""Near-duplicates: a candidate that repeats text already in the context.

The test is word shingles (lower-cased ``\\w+`` words, three at a time) against the passages already taken from
*other* documents:

- A candidate whose share of shingles found there is at or above the threshold
  (``RAGSERVE_CONTEXT__DUPLICATE_THRESHOLD``) is a duplicate and is left out. That catches the same text under
  another id (share 1.0) and another version of the same passage (words dropped or changed here and there, a
  sentence moved: each edit breaks only the three shingles that touch it), in any chunking.
- A candidate under the threshold that still repeats whole sentences (half their words or more inside a shingle
  already taken) keeps only its longest run of sentences that do not (:func:`novel_run`): a distinct document that
  shares a sentence, a boilerplate paragraph or the edge of a copy brings its new text and not the repeated one.
  When no run of at least :data:`MIN_NOVEL_WORDS` words is left, it is a duplicate.

It misses a paraphrase (other words, same meaning: the dense vectors would see it, shingles do not). Chunks of one
document are never duplicates of each other: they merge (:mod:`service.context.passages`).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable

SHINGLE_WORDS = 3
MIN_SHINGLES = 4
"""A candidate with fewer shingles than this (under six words) is never called a duplicate: too little to tell."""
MIN_NOVEL_WORDS = 8
"""A candidate left with a shorter run of new sentences than this is a duplicate: a fragment is not worth a
passage's header."""
REPEATED_SENTENCE = 0.5
_WORD = re.compile(r"\w+")
SENTENCE_END = re.compile(r"[.!?][\"')\]]*(?=\s)")


def _hash(words: list[str], i: int) -> int:
    return zlib.crc32(" ".join(words[i:i + SHINGLE_WORDS]).encode())


def shingles(text: str) -> frozenset[int]:
    words = _WORD.findall(text.lower())
    if len(words) < SHINGLE_WORDS:
        return frozenset()
    return frozenset(_hash(words, i) for i in range(len(words) - SHINGLE_WORDS + 1))


def repeated(candidate: frozenset[int], taken: Iterable[frozenset[int]]) -> tuple[float, frozenset[int]]:
    """The share of ``candidate``'s shingles found in ``taken`` (0 for a candidate too short to judge), and those
    shingles, which :func:`novel_run` takes."""
    seen: set[int] = set()
    for other in taken:
        seen |= candidate & other
    return (0.0 if len(candidate) < MIN_SHINGLES else len(seen) / len(candidate)), frozenset(seen)


def novel_run(text: str, taken: frozenset[int], within: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """The character range of the longest run of ``text``'s sentences that do not repeat ``taken`` (a sentence
    repeats when half its words or more sit inside a shingle ``taken`` holds) and that meets ``within`` (the
    candidate's own chunk, when ``text`` holds its neighbours too), stripped of surrounding spaces. None when no
    sentence repeats, or no such run has :data:`MIN_NOVEL_WORDS` words: then the text is kept whole."""
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    words = [text[a:b].lower() for a, b in spans]
    covered = [False] * len(words)
    for i in range(len(words) - SHINGLE_WORDS + 1):
        if _hash(words, i) in taken:
            covered[i:i + SHINGLE_WORDS] = [True] * SHINGLE_WORDS
    bounds = [0, *(m.end() for m in SENTENCE_END.finditer(text)), len(text)]
    sentences: list[tuple[int, int, int, bool]] = []  # start, end, words, repeats
    k = 0
    for a, b in zip(bounds, bounds[1:], strict=False):
        first = k
        while k < len(spans) and spans[k][0] < b:
            k += 1
        if k > first:
            sentences.append((a, b, k - first, sum(covered[first:k]) >= REPEATED_SENTENCE * (k - first)))
    if not any(repeats for *_, repeats in sentences):
        return None
    best: tuple[int, int, int] = (0, 0, 0)
    run: tuple[int, int, int] | None = None
    for a, b, n, repeats in sentences:
        if repeats:
            run = None
            continue
        run = (run[0], b, run[2] + n) if run is not None else (a, b, n)
        if run[2] > best[2] and (within is None or (run[0] < within[1] and within[0] < run[1])):
            best = run
    if best[2] < MIN_NOVEL_WORDS:
        return None
    a, b = best[0], best[1]
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return (a, b)
