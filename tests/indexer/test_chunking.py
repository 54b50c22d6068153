"""Chunk boundaries, overlap, window cap and offsets, with the real MiniLM tokenizer."""

from __future__ import annotations

import pytest

from indexer.chunking import Chunker
from indexer.documents import ParsedDocument, Section
from indexer.tokenizer import load_tokenizer
from service.profiles import MINILM, default_checkpoint


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return load_tokenizer(default_checkpoint(MINILM.embedding))


def _doc(text: str, **kw) -> ParsedDocument:  # type: ignore[no-untyped-def]
    return ParsedDocument("d", [Section(text, 0, **kw)], full_text=text)


def test_windows_overlap_and_cover_everything(tokenizer) -> None:  # type: ignore[no-untyped-def]
    words = [f"w{i}" for i in range(300)]
    text = " ".join(words)
    chunks = Chunker(tokenizer, window=256, size=50, overlap=10).chunk(_doc(text))
    assert len(chunks) > 5
    seen = set()
    for a, b in zip(chunks, chunks[1:], strict=False):
        overlap = set(a.text.split()) & set(b.text.split())
        assert 3 <= len(overlap) <= 12, (a.text[-40:], b.text[:40])
    for c in chunks:
        assert c.tokens <= 50
        assert text[c.location["char_start"]:c.location["char_end"]] == c.text
        assert not c.text[0].isspace() and c.text.split()[0] in words  # starts on a whole word
        seen.update(c.text.split())
    assert seen == set(words)
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))


def test_size_is_capped_by_the_window_minus_special_tokens(tokenizer) -> None:  # type: ignore[no-untyped-def]
    chunker = Chunker(tokenizer, window=256, size=10_000)
    assert chunker.size == 254  # [CLS] and [SEP]
    text = "word " * 2000
    for c in chunker.chunk(_doc(text)):
        assert len(tokenizer.encode(c.text).ids) <= 256


def test_sections_are_never_crossed_and_carry_headings_pages(tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = "alpha beta gamma\ndelta epsilon"
    doc = ParsedDocument("d", [Section("alpha beta gamma", 0, headings=("H1",), page=1),
                               Section("delta epsilon", 17, headings=("H1", "H2"), page=2)], full_text=text)
    chunks = Chunker(tokenizer, window=256).chunk(doc)
    assert [(c.text, c.location.get("headings"), c.location.get("page")) for c in chunks] == [
        ("alpha beta gamma", ["H1"], 1), ("delta epsilon", ["H1", "H2"], 2)]


def test_byte_offsets_for_non_ascii(tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = "café naïve résumé " * 3
    (c,) = Chunker(tokenizer, window=256).chunk(_doc(text))
    raw = text.encode()
    assert raw[c.location["byte_start"]:c.location["byte_end"]].decode() == c.text


def test_unsplit_records_are_one_chunk(tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = "word " * 1000
    (c,) = Chunker(tokenizer, window=256).chunk(_doc(text), split=False)
    assert c.text == text.strip()
