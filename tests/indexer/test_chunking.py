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


def test_an_unsplit_record_counts_every_token_it_keeps(tokenizer) -> None:  # type: ignore[no-untyped-def]
    """Its count is the whole text's, past the chunk size and past the window (it was capped at the size,
    which understated a passage corpus's tokens and misled the batch packer)."""
    chunker = Chunker(tokenizer, window=256, size=64)
    (short,) = chunker.chunk(_doc("  " + "word " * 100), split=False)
    assert short.text == ("word " * 100).strip() and short.tokens == 100
    (long,) = chunker.chunk(_doc("word " * 1000), split=False)
    assert long.tokens == 1000
    mixed = "Café naïve résumé, the co-operative's 3.5% (approx.) rate. " * 20
    (c,) = chunker.chunk(_doc(mixed), split=False)
    assert c.tokens == len(tokenizer.encode(c.text, add_special_tokens=False).ids) == 400


def _table(header: str, rows: list[str], first_row: int = 2) -> ParsedDocument:
    from indexer.documents import Table

    body = "".join(r + "\n" for r in rows)
    starts, at = [], 0
    for number, row in enumerate(rows, start=first_row):
        starts.append((number, at))
        at += len(row) + 1
    full = f"{header}\n{body}"
    return ParsedDocument("t", [Section(body, len(header) + 1, ("Sheet",), location={"sheet": "Sheet"},
                                        table=Table(header, tuple(starts)))], full_text=full)


def test_table_chunks_are_whole_rows_under_the_header(tokenizer) -> None:  # type: ignore[no-untyped-def]
    rows = [f"item{i} | {i * 10} | warehouse {i % 3}" for i in range(40)]
    doc = _table("name | count | place", rows)
    chunks = Chunker(tokenizer, window=256, size=60).chunk(doc)
    assert len(chunks) > 3
    covered = []
    for c in chunks:
        header, *lines = c.text.split("\n")
        assert header == "name | count | place" and c.tokens <= 60
        assert c.tokens == len(tokenizer.encode(c.text, add_special_tokens=False).ids)
        first, last = c.location["rows"]
        assert lines == rows[first - 2:last - 1]  # whole rows, numbered as the sheet numbers them
        assert doc.full_text[c.location["char_start"]:c.location["char_end"]] == "\n".join(lines)
        assert c.location["sheet"] == "Sheet" and c.location["headings"] == ["Sheet"]
        covered.extend(range(first, last + 1))
    assert covered == list(range(2, 42))  # every row once, no overlap


def test_a_row_longer_than_a_chunk_is_cut_into_windows_of_its_own(tokenizer) -> None:  # type: ignore[no-untyped-def]
    long_row = " ".join(f"w{i}" for i in range(200))
    chunks = Chunker(tokenizer, window=256, size=50, overlap=5).chunk(_table("h", ["short", long_row, "tail"]))
    assert chunks[0].text == "h\nshort" and chunks[0].location["rows"] == [2, 2]
    middle = [c for c in chunks if c.location["rows"] == [3, 3]]
    assert len(middle) > 2 and all(c.tokens <= 50 and not c.text.startswith("h\n") for c in middle)
    assert chunks[-1].text == "h\ntail" and chunks[-1].location["rows"] == [4, 4]


def test_unsplit_table_is_one_chunk_under_the_header(tokenizer) -> None:  # type: ignore[no-untyped-def]
    (c,) = Chunker(tokenizer, window=256, size=20).chunk(_table("a | b", ["1 | 2", "3 | 4"]), split=False)
    assert c.text == "a | b\n1 | 2\n3 | 4" and c.location["rows"] == [2, 3]


def test_unsplit_table_counts_every_token_it_keeps(tokenizer) -> None:  # type: ignore[no-untyped-def]
    rows = [f"item{i} | {i * 10}" for i in range(30)]
    (c,) = Chunker(tokenizer, window=256, size=8).chunk(_table("name | count", rows), split=False)
    assert c.text == "name | count\n" + "\n".join(rows)
    assert c.tokens == len(tokenizer.encode(c.text, add_special_tokens=False).ids) == 3 + 30 * 4  # item, ##i, |, i*10
