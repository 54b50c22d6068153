"""Token-aware chunking with the embedding model's tokenizer.

Each section (a heading's body, a PDF page) is cut into windows of ``size`` tokens that overlap by
``overlap`` tokens; windows end on token boundaries, and a chunk never crosses a section, so its headings
and page are exact. ``size`` is capped by the runner's window minus the special tokens the tokenizer adds,
so no chunk is ever truncated by the runner. Offsets are characters and UTF-8 bytes into the document's
full text, for citations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer

from indexer.documents import ParsedDocument


@dataclass(frozen=True)
class ChunkText:
    chunk_index: int
    text: str
    tokens: int
    location: dict[str, Any]


class Chunker:
    def __init__(self, tokenizer: Tokenizer, *, window: int, size: int | None = None, overlap: int = 32) -> None:
        specials = tokenizer.num_special_tokens_to_add(False)
        self.max_size = window - specials
        self.size = min(size or self.max_size, self.max_size)
        if self.size < 8:
            raise ValueError(f"chunk size {self.size} is too small")
        self.overlap = min(overlap, self.size // 2)
        self.tokenizer = tokenizer

    def chunk(self, doc: ParsedDocument, *, split: bool = True) -> list[ChunkText]:
        """Chunks of ``doc``; with ``split=False`` each section is one chunk cut at the window."""
        out: list[ChunkText] = []
        byte_index = _ByteOffsets(doc.full_text)
        for section in doc.sections:
            encoding = self.tokenizer.encode(section.text, add_special_tokens=False)
            offsets = encoding.offsets
            if not offsets:
                continue
            start = 0
            while True:
                end = min(start + self.size, len(offsets))
                if split and end < len(offsets):
                    end = _word_boundary(offsets, end, lowest=start + self.size // 2)
                c0, c1 = offsets[start][0], offsets[end - 1][1]
                if not split:
                    c1 = len(section.text)
                raw = section.text[c0:c1]
                text = raw.strip()
                c0 += len(raw) - len(raw.lstrip())
                c1 = c0 + len(text)
                if text:
                    a = section.char_start + c0
                    b = section.char_start + c1
                    location: dict[str, Any] = {"char_start": a, "char_end": b,
                                                "byte_start": byte_index(a), "byte_end": byte_index(b)}
                    if section.headings:
                        location["headings"] = list(section.headings)
                    if section.page is not None:
                        location["page"] = section.page
                    out.append(ChunkText(len(out), text, end - start, location))
                if end == len(offsets) or not split:
                    break
                start = _word_boundary(offsets, max(end - self.overlap, start + 1), lowest=start + 1)
        return out


def _word_boundary(offsets: list[tuple[int, int]], i: int, *, lowest: int) -> int:
    """Move token index ``i`` back to the start of its word (a token glued to the one before it, like
    WordPiece's '##' pieces, is inside a word), but not below ``lowest``."""
    j = i
    while j > lowest and offsets[j][0] == offsets[j - 1][1]:
        j -= 1
    return j if j > lowest or offsets[j][0] != offsets[j - 1][1] else i


class _ByteOffsets:
    """Character offset → UTF-8 byte offset, linear for ASCII text, cached prefix sums otherwise."""

    def __init__(self, text: str) -> None:
        self.ascii = text.isascii()
        self.text = text
        self._prefix: list[int] | None = None

    def __call__(self, char_offset: int) -> int:
        if self.ascii:
            return char_offset
        if self._prefix is None:
            prefix = [0]
            for ch in self.text:
                prefix.append(prefix[-1] + len(ch.encode("utf-8")))
            self._prefix = prefix
        return self._prefix[min(char_offset, len(self._prefix) - 1)]
