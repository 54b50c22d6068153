"""Documents chunked by the indexer's own chunker with the real all-MiniLM-L6-v2 tokenizer (the file the runner
loads), as the store returns them: hits with offsets into their document's text."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from indexer.chunking import Chunker
from indexer.documents import ParsedDocument, Section
from service.context.passages import Candidate
from service.context.tokens import LocalCounter
from service.profiles import MINILM, default_checkpoint
from service.store.types import Hit, point_id

MODEL = Path(default_checkpoint(MINILM.embedding))


def counter() -> LocalCounter:
    return LocalCounter("all-MiniLM-L6-v2", MODEL)


def chunker(size: int = 24, overlap: int = 8) -> Chunker:
    tok = Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return Chunker(tok, window=256, size=size, overlap=overlap)


def chunk_hits(doc_id: str, text: str, *, size: int = 24, overlap: int = 8, collection: str = "kb",
               title: str | None = None, headings: tuple[str, ...] = ()) -> list[Hit]:
    doc = ParsedDocument(doc_id, [Section(text, 0, headings)], full_text=text)
    meta = {"title": title} if title else {}
    return [Hit(point_id(collection, doc_id, c.chunk_index), 0.0, doc_id, c.chunk_index, c.text, meta, c.location)
            for c in chunker(size, overlap).chunk(doc)]


def ranked(hits: list[Hit], collection: str = "kb") -> list[Candidate]:
    """Candidates in the given order, scores falling."""
    return [Candidate(collection, h, 1.0 - i / 1000) for i, h in enumerate(hits)]


def by_doc(hits: list[Hit], collection: str = "kb") -> dict[tuple[str, str | None, str], dict[int, Hit]]:
    out: dict[tuple[str, str | None, str], dict[int, Hit]] = {}
    for h in hits:
        out.setdefault((collection, h.tenant, h.doc_id), {})[h.chunk_index] = h
    return out
