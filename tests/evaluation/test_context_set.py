"""service/evaluation/copies.py: the near-duplicate set built from a hand-made BEIR folder, and from SciFact."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from service.evaluation.copies import build_copies, edit_text, load_copies

SCIFACT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "scifact"
SENTENCE_BREAK = re.compile(r"((?<=[.!?])\s+)")
QUERIES = '{"_id": "q1", "text": "what d1 says", "metadata": {}}\n{"_id": "q2", "text": "caf\\u00e9", "metadata": {}}\n'
QRELS = {"test": "query-id\tcorpus-id\tscore\nq1\td1\t1\n", "train": "query-id\tcorpus-id\tscore\nq2\td7\t1\nq2\td8\t0\n"}


def sentence(doc: int, number: int) -> str:
    # every word of the folder is distinct, so a copy's sentence names its original by its last word
    return " ".join(f"d{doc}s{number}w{k}" for k in range(6 + number)) + ".!?"[number % 3]


def write_beir(root: Path) -> dict[str, dict[str, object]]:
    """Ten documents of three to five sentences, some with a double space or a newline between sentences."""
    docs: dict[str, dict[str, object]] = {}
    for i in range(10):
        gap = {3: "  ", 5: "\n"}.get(i, " ")
        text = gap.join(sentence(i, j) for j in range(3 + i % 3))
        docs[f"d{i}"] = {"_id": f"d{i}", "title": f"Title {i} caf\u00e9", "text": text, "metadata": {}}
    root.mkdir()
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs.values()), encoding="utf-8")
    (root / "queries.jsonl").write_text(QUERIES, encoding="utf-8")
    (root / "qrels").mkdir()
    for split, text in QRELS.items():
        (root / "qrels" / f"{split}.tsv").write_text(text, encoding="utf-8")
    return docs


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def corpus(root: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (root / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]


def test_the_same_arguments_write_the_same_bytes(tmp_path: Path) -> None:
    write_beir(tmp_path / "src")
    build_copies(tmp_path / "src", tmp_path / "a")
    build_copies(tmp_path / "src", tmp_path / "b")
    build_copies(tmp_path / "src", tmp_path / "other", seed=14)

    assert files(tmp_path / "a") == files(tmp_path / "b")
    assert sorted(files(tmp_path / "a")) == ["copies.json", "corpus.jsonl", "qrels/test.tsv", "qrels/train.tsv",
                                             "queries.jsonl"]
    assert files(tmp_path / "a")["corpus.jsonl"] != files(tmp_path / "other")["corpus.jsonl"]


def test_exactly_the_share_gets_a_copy_after_every_original(tmp_path: Path) -> None:
    docs = write_beir(tmp_path / "src")
    copies = build_copies(tmp_path / "src", tmp_path / "set")

    assert len(copies) == round(0.4 * 10) == 4
    assert all(copy == f"{original}~v2" and original in docs for copy, original in copies.items())
    assert json.loads((tmp_path / "set" / "copies.json").read_text()) == copies == load_copies(tmp_path / "set")
    source_lines = (tmp_path / "src" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    lines = (tmp_path / "set" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines[:10] == source_lines  # the originals, unchanged
    originals = sorted(copies.values(), key=list(docs).index)
    assert [r["_id"] for r in corpus(tmp_path / "set")[10:]] == [f"{o}~v2" for o in originals]


def test_queries_and_qrels_are_copied_byte_for_byte(tmp_path: Path) -> None:
    write_beir(tmp_path / "src")
    build_copies(tmp_path / "src", tmp_path / "set")

    source, written = files(tmp_path / "src"), files(tmp_path / "set")
    for name in ("queries.jsonl", "qrels/test.tsv", "qrels/train.tsv"):
        assert written[name] == source[name]


@pytest.mark.parametrize(("share", "drop"), [(0.4, 0.04), (1.0, 0.25)])
def test_a_copy_is_its_original_less_some_words_with_one_sentence_moved(tmp_path: Path, share: float,
                                                                         drop: float) -> None:
    docs = write_beir(tmp_path / "src")
    copies = build_copies(tmp_path / "src", tmp_path / "set", share=share, drop=drop)
    records = {str(r["_id"]): r for r in corpus(tmp_path / "set")}

    dropped = words = 0
    for copy_id, original_id in copies.items():
        original, copy = docs[original_id], records[copy_id]
        assert {**copy, "_id": original_id, "text": original["text"]} == original  # title, metadata kept
        o_parts = SENTENCE_BREAK.split(str(original["text"]))
        c_parts = SENTENCE_BREAK.split(str(copy["text"]))
        assert c_parts[1::2] == o_parts[1::2]  # the whitespace between sentences stays in place
        o_sentences, c_sentences = o_parts[0::2], c_parts[0::2]
        # a sentence keeps its last word, so it names the original sentence it came from
        order = [[s.split()[-1] for s in o_sentences].index(s.split()[-1]) for s in c_sentences]
        moves = [(a, b) for a in range(len(order)) for b in range(len(order)) if a != b]
        assert any(moved(list(range(len(order))), a, b) == order for a, b in moves)
        for c_sentence, source in zip(c_sentences, order, strict=True):
            kept, all_words = c_sentence.split(" "), o_sentences[source].split(" ")
            assert kept == [w for w in all_words if w in kept]  # the same words in order, less the dropped ones
            dropped += len(all_words) - len(kept)
            words += len(all_words)
    assert len(copies) == round(share * 10)
    if drop > 0.1:
        assert 0 < dropped < words  # deterministic for the seed; the draws did drop words


def moved(items: list[int], source: int, target: int) -> list[int]:
    items.insert(target, items.pop(source))
    return items


def test_a_single_sentence_only_loses_words_and_keeps_its_last() -> None:
    text = "one two three four five six seven eight."

    assert edit_text(text, random.Random(1), 1.0) == "eight."
    assert edit_text(text, random.Random(1), 0.0) == text
    edited = edit_text(text, random.Random(1), 0.5)
    kept = edited.split(" ")
    assert kept[-1] == "eight." and kept == [w for w in text.split(" ") if w in kept] and kept != text.split(" ")


def test_whitespace_after_the_last_sentence_stays_at_the_end() -> None:
    text = "First one here. Second one here.\n"

    assert edit_text(text, random.Random(3), 0.0) == "Second one here. First one here.\n"


def test_a_plain_folder_has_no_copies(tmp_path: Path) -> None:
    write_beir(tmp_path / "src")

    assert load_copies(tmp_path / "src") == {}


@pytest.mark.skipif(not (SCIFACT / "corpus.jsonl").exists(), reason="SciFact is not in ../shared/data")
def test_scifact_set_has_the_share_and_the_same_bytes_again(tmp_path: Path) -> None:
    copies = build_copies(SCIFACT, tmp_path / "a")
    build_copies(SCIFACT, tmp_path / "b")

    documents = len((SCIFACT / "corpus.jsonl").read_text(encoding="utf-8").splitlines())
    assert len(copies) == round(0.4 * documents)
    assert files(tmp_path / "a") == files(tmp_path / "b")
    records = {str(r["_id"]): str(r["text"]) for r in corpus(tmp_path / "a")}
    before = sum(len(records[o].split()) for o in copies.values())
    after = sum(len(records[c].split()) for c in copies)
    assert 0.03 < 1 - after / before < 0.05  # about 4 % of the words, the last of each sentence always kept
