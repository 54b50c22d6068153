"""Near-duplicates: a candidate that repeats text already in the context.

The test is word shingles: the share of a candidate's word 3-grams (lower-cased ``\\w+`` words) that the
passages already taken from *other* documents hold. At or above the threshold
(``RAGSERVE_CONTEXT__DUPLICATE_THRESHOLD``) the candidate is a duplicate. It catches the same text under
another id (share 1.0) and another version of the same passage (words dropped or changed here and there, a
sentence moved: each edit breaks only the three shingles that touch it), in any chunking. It misses a
paraphrase (other words, same meaning: the dense vectors would see it, shingles do not) and a passage whose
repeated part is under the threshold, e.g. a chunk half of which repeats a passage. Chunks of one document are
never duplicates of each other: they merge (:mod:`service.context.passages`).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable

SHINGLE_WORDS = 3
MIN_SHINGLES = 4
"""A candidate with fewer shingles than this (under six words) is never called a duplicate: too little to tell."""
_WORD = re.compile(r"\w+")


def shingles(text: str) -> frozenset[int]:
    words = _WORD.findall(text.lower())
    if len(words) < SHINGLE_WORDS:
        return frozenset()
    return frozenset(zlib.crc32(" ".join(words[i:i + SHINGLE_WORDS]).encode())
                     for i in range(len(words) - SHINGLE_WORDS + 1))


def repeated_share(candidate: frozenset[int], taken: Iterable[frozenset[int]]) -> float:
    """The share of ``candidate``'s shingles found in ``taken``; 0 for a candidate too short to judge."""
    if len(candidate) < MIN_SHINGLES:
        return 0.0
    seen: set[int] = set()
    for other in taken:
        seen |= candidate & other
    return len(seen) / len(candidate)
