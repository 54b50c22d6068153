"""A near-duplicate test set: a BEIR folder plus edited second versions of a seeded share of its documents.

``python -m service.evaluation.copies SRC DEST [--share 0.4] [--drop 0.04] [--seed 13]`` writes DEST in BEIR
layout. ``corpus.jsonl`` holds every record of SRC's line for line, then, in corpus order, a copy
``{id}~v2`` of each sampled document (same title and metadata) whose text has a few words dropped and one
sentence moved, the way a re-exported or lightly revised file reaches an index twice. ``queries.jsonl`` and
``qrels/*.tsv`` are copied byte for byte: the qrels name originals only, so a copy counts as its original
(``copies.json`` maps each copy to it). The same arguments give byte-identical files.

The edit keeps the copy's text byte-identical to the original apart from the edit itself. Sentences are split on
``(?<=[.!?])\\s+``; the whitespace between sentences stays where it was, the sentences move. Words are runs of
non-space characters; a dropped word leaves with the whitespace that followed it. The last word of each sentence
is never dropped: it carries the full stop that marks the boundary (a sentence's inner words never end in one,
or the split would have cut there), so the copy splits into the same sentences, and no text loses all its words.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
from itertools import pairwise
from pathlib import Path

COPIES_FILE = "copies.json"
COPY_SUFFIX = "~v2"
_SENTENCE_BREAK = re.compile(r"((?<=[.!?])\s+)")
_WORD = re.compile(r"\S+")


def drop_words(sentence: str, rng: random.Random, drop: float) -> str:
    """``sentence`` less each word but the last with probability ``drop``, the rest of its bytes kept."""
    words = list(_WORD.finditer(sentence))
    if not words:
        return sentence
    out = [sentence[: words[0].start()]]
    for word, following in pairwise(words):
        if rng.random() >= drop:
            out.append(sentence[word.start() : following.start()])
    out.append(sentence[words[-1].start() :])
    return "".join(out)


def edit_text(text: str, rng: random.Random, drop: float) -> str:
    """Drop about ``drop`` of the words, then move one sentence to another position (texts of two or more)."""
    parts = _SENTENCE_BREAK.split(text)
    sentences, breaks = parts[0::2], parts[1::2]
    tail = ""
    if len(sentences) > 1 and sentences[-1] == "":  # whitespace after the last full stop stays at the end
        sentences.pop()
        tail = breaks.pop()
    sentences = [drop_words(s, rng, drop) for s in sentences]
    if len(sentences) >= 2:
        source = rng.randrange(len(sentences))
        target = rng.randrange(len(sentences) - 1)
        target += target >= source  # never back to where it was
        sentences.insert(target, sentences.pop(source))
    out = [sentences[0]]
    for gap, sentence in zip(breaks, sentences[1:], strict=True):
        out += [gap, sentence]
    return "".join(out) + tail


def build_copies(src: Path, dest: Path, *, share: float = 0.4, drop: float = 0.04, seed: int = 13) -> dict[str, str]:
    """Write the near-duplicate set of BEIR folder ``src`` to ``dest``; returns ``{copy_id: original_id}``.

    Exactly ``round(share * documents)`` documents get a copy (``random.Random(seed).sample``), edited with the
    same generator in corpus order.
    """
    if not 0 <= share <= 1 or not 0 <= drop < 1:
        raise ValueError(f"share must be in [0, 1] and drop in [0, 1), got share={share}, drop={drop}")
    if src.resolve() == dest.resolve():
        raise ValueError("dest must differ from src: the originals are read while the copies are written")
    lines = [line for line in (src / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]
    ids = [str(r["_id"]) for r in records]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{src / 'corpus.jsonl'} repeats document ids")
    rng = random.Random(seed)
    chosen = set(rng.sample(ids, round(share * len(ids))))
    copies: dict[str, str] = {}
    copy_lines = []
    for doc_id, record in zip(ids, records, strict=True):
        if doc_id not in chosen:
            continue
        copy_id = doc_id + COPY_SUFFIX
        if copy_id in ids:
            raise ValueError(f"the copy id {copy_id!r} is already a document of {src}")
        copies[copy_id] = doc_id
        text = edit_text(record.get("text") or "", rng, drop)
        copy_lines.append(json.dumps({**record, "_id": copy_id, "text": text}))

    dest.mkdir(parents=True, exist_ok=True)
    (dest / "corpus.jsonl").write_text("".join(f"{line}\n" for line in [*lines, *copy_lines]), encoding="utf-8")
    shutil.copyfile(src / "queries.jsonl", dest / "queries.jsonl")
    (dest / "qrels").mkdir(exist_ok=True)
    for qrels in sorted((src / "qrels").glob("*.tsv")):
        shutil.copyfile(qrels, dest / "qrels" / qrels.name)
    (dest / COPIES_FILE).write_text(json.dumps(copies, indent=2) + "\n", encoding="utf-8")
    return copies


def load_copies(root: Path) -> dict[str, str]:
    """``{copy_id: original_id}`` of a set written by :func:`build_copies`; empty for a plain BEIR folder."""
    path = root / COPIES_FILE
    if not path.exists():
        return {}
    return {str(k): str(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m service.evaluation.copies",
                                     description="Write a near-duplicate test set from a BEIR folder.")
    parser.add_argument("src", type=Path, help="BEIR folder to read")
    parser.add_argument("dest", type=Path, help="folder to write the set to")
    parser.add_argument("--share", type=float, default=0.4, help="share of documents that get a copy")
    parser.add_argument("--drop", type=float, default=0.04, help="probability that a copy loses a given word")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    copies = build_copies(args.src, args.dest, share=args.share, drop=args.drop, seed=args.seed)
    print(f"{len(copies)} copies written to {args.dest}")


if __name__ == "__main__":
    main()
