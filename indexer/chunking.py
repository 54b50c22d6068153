"""Token-aware chunking with the embedding model's tokenizer.

Each section (a heading's body, a PDF page, a slide) is cut into windows of ``size`` tokens that overlap
by ``overlap`` tokens; windows end on token boundaries, and a chunk never crosses a section, so its headings
and page are exact. A table section (CSV, a sheet) is cut between rows instead: each chunk is whole rows
under the table's header line, with the row range in its location. ``size`` is capped by the runner's
window minus the special tokens the tokenizer adds, so no split chunk is ever truncated by the runner.
Unsplit (``split=False``: a JSONL passage, a record) each section is kept whole, and a chunk's ``tokens`` is
always the count of its whole text: one past ``max_size`` is cut by the runner, which the pipeline counts and
reports (:meth:`Chunker.truncated`). Offsets are characters and UTF-8 bytes into the document's full text,
for citations (a table chunk's offsets cover its rows; its stored text has the header line above them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer

from indexer.documents import ParsedDocument, Section, Table


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
        self.window = window

    def truncated(self, chunk: ChunkText) -> bool:
        """Whether the runner embeds ``chunk`` cut to its window (only an unsplit chunk can be)."""
        return chunk.tokens > self.max_size

    def chunk(self, doc: ParsedDocument, *, split: bool = True) -> list[ChunkText]:
        """Chunks of ``doc``; with ``split=False`` each section is one whole chunk (the runner cuts one past
        its window: :meth:`truncated`)."""
        out: list[ChunkText] = []
        byte_index = _ByteOffsets(doc.full_text)
        for section in doc.sections:
            if section.table is not None:
                self._table(section, section.table, split, byte_index, out)
            else:
                self._windows(section, split, byte_index, out)
        return out

    def _windows(self, section: Section, split: bool, byte_index: _ByteOffsets, out: list[ChunkText],
                 extra: dict[str, Any] | None = None) -> None:
        if not split:  # the whole text, counted as the runner will see it (the batch packer and the job use it)
            tokens = self._count(section.text.strip())
            if tokens:
                self._emit(section, 0, len(section.text), tokens, byte_index, out, extra)
            return
        encoding = self.tokenizer.encode(section.text, add_special_tokens=False)
        offsets = encoding.offsets
        if not offsets:
            return
        start = 0
        while True:
            end = min(start + self.size, len(offsets))
            if end < len(offsets):
                end = _word_boundary(offsets, end, lowest=start + self.size // 2)
            c0, c1 = offsets[start][0], offsets[end - 1][1]
            self._emit(section, c0, c1, end - start, byte_index, out, extra)
            if end == len(offsets):
                break
            start = _word_boundary(offsets, max(end - self.overlap, start + 1), lowest=start + 1)

    def _table(self, section: Section, table: Table, split: bool, byte_index: _ByteOffsets,
               out: list[ChunkText]) -> None:
        """Whole rows per chunk, as many as fit under the header; a row too long for one chunk is cut into
        windows of its own (without the header). Tables have no overlap: a row stands alone."""
        text = section.text
        starts = [start for _, start in table.rows] + [len(text)]
        rows = [(number, starts[i], starts[i + 1]) for i, (number, _) in enumerate(table.rows)]
        if not rows:
            return
        header_tokens = self._count(table.header) + 1
        header = table.header if header_tokens <= self.size // 2 else ""  # too wide to repeat in every chunk
        if not split:
            self._emit_rows(section, rows, header, byte_index, out, cap=True)
            return
        counts = [len(e.ids) for e in self.tokenizer.encode_batch(
            [text[a:b] for _, a, b in rows], add_special_tokens=False)]
        budget = self.size - (header_tokens if header else 0)
        i = 0
        while i < len(rows):
            if counts[i] + 1 > budget:  # one row longer than a chunk
                number, a, b = rows[i]
                part = Section(text[a:b], section.char_start + a, section.headings, section.page, section.location)
                self._windows(part, True, byte_index, out, {"rows": [number, number]})
                i += 1
                continue
            j, used = i + 1, counts[i] + 1
            while j < len(rows) and used + counts[j] + 1 <= budget:
                used += counts[j] + 1
                j += 1
            while not self._emit_rows(section, rows[i:j], header, byte_index, out) and j - i > 1:
                j -= 1  # the estimate was short (tokens merged across rows): one row fewer
            i = j

    def _emit_rows(self, section: Section, rows: list[tuple[int, int, int]], header: str,
                   byte_index: _ByteOffsets, out: list[ChunkText], *, cap: bool = False) -> bool:
        """Emit ``rows`` as one chunk under ``header``; False (and nothing emitted) when it would not fit."""
        raw = section.text[rows[0][1]:rows[-1][2]]
        body = raw.strip()
        text = f"{header}\n{body}" if header else body
        tokens = self._count(text)
        if tokens > self.size and not cap and len(rows) > 1:
            return False
        c0 = rows[0][1] + len(raw) - len(raw.lstrip())
        self._emit(section, c0, c0 + len(body), tokens, byte_index, out,
                   {"rows": [rows[0][0], rows[-1][0]]}, text=text)
        return True

    def _emit(self, section: Section, c0: int, c1: int, tokens: int, byte_index: _ByteOffsets,
              out: list[ChunkText], extra: dict[str, Any] | None = None, *, text: str | None = None) -> None:
        """Append the chunk of ``section.text[c0:c1]`` (whitespace trimmed) with its location; ``text``, when
        given, is what is stored instead (a table's rows under their header: offsets still cover the rows)."""
        raw = section.text[c0:c1]
        body = raw.strip()
        if not body:
            return
        c0 += len(raw) - len(raw.lstrip())
        a = section.char_start + c0
        b = a + len(body)
        location: dict[str, Any] = {"char_start": a, "char_end": b,
                                    "byte_start": byte_index(a), "byte_end": byte_index(b)}
        if section.headings:
            location["headings"] = list(section.headings)
        if section.page is not None:
            location["page"] = section.page
        location.update(section.location)
        location.update(extra or {})
        out.append(ChunkText(len(out), text if text is not None else body, tokens, location))

    def _count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


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
