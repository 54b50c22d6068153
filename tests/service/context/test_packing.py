"""The packer on real chunks (the indexer's chunker, the real MiniLM tokenizer): merging counts an overlap
once and keeps each passage a slice of its source, copies are dropped, and the budget holds exactly."""

from __future__ import annotations

import asyncio
import random
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.context.packing import Packer, PackOptions
from service.context.template import Template
from service.store.types import Hit
from tests.service.context.helpers import by_doc, chunk_hits, counter, ranked

WORDS = ("heron owl salmon glacier volcano protein enzyme cell river delta basalt magma lattice photon quark "
         "neuron synapse cortex marrow tissue plasma crystal ion orbit comet nebula pulsar").split()


def text_of(rng: random.Random, sentences: int) -> str:
    out = []
    for _ in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
        out.append(" ".join(words).capitalize() + rng.choice([".", ".", "!", "?"]))
    return " ".join(out)


def pack(candidates, chunks, **options):  # type: ignore[no-untyped-def]
    opts = PackOptions(**{"template": Template.parse("[{number}] {title}\n{text}"), **options})
    return asyncio.run(Packer(counter(), opts).pack(candidates, chunks))


def test_overlapping_chunks_merge_into_the_source_text_with_the_overlap_counted_once() -> None:
    text = text_of(random.Random(1), 12)
    hits = chunk_hits("d", text, size=24, overlap=8)
    assert len(hits) >= 4 and hits[1].location["char_start"] < hits[0].location["char_end"]  # they overlap
    packed = pack(ranked([hits[2], hits[1]]), by_doc(hits), budget=2000)
    [passage] = packed.passages
    start, end = hits[1].location["char_start"], hits[2].location["char_end"]
    assert (passage.text, passage.start, passage.end) == (text[start:end], start, end)
    assert [h.chunk_index for h in passage.chunks] == [1, 2]
    assert [(d.candidate.hit.chunk_index, d.reason, d.passage is passage) for d in packed.dropped] == [
        (1, "merged", True)]
    assert packed.context == f"[1] d\n{text[start:end]}"


def test_neighbours_extend_a_chunk_both_ways_and_stop_at_the_document_edge() -> None:
    text = text_of(random.Random(2), 12)
    hits = chunk_hits("d", text, size=24, overlap=8)
    packed = pack(ranked([hits[0]]), by_doc(hits), budget=2000, neighbours=2)
    [passage] = packed.passages
    assert [h.chunk_index for h in passage.chunks] == [0, 1, 2]
    assert passage.text == text[:hits[2].location["char_end"]]
    assert passage.location()["byte_end"] == len(passage.text.encode())


def test_a_copy_under_another_id_is_dropped_and_a_different_document_is_not() -> None:
    rng = random.Random(3)
    text, other = text_of(rng, 6), text_of(rng, 6)
    original = chunk_hits("orig", text, size=64)
    copy = chunk_hits("copy", text.replace(" ", "  ", 1), size=64)  # same words, other bytes
    distinct = chunk_hits("other", other, size=64)
    packed = pack(ranked([original[0], copy[0], distinct[0]]), {}, budget=2000)
    assert [p.first.doc_id for p in packed.passages] == ["orig", "other"]
    assert [(d.candidate.hit.doc_id, d.reason, d.passage.first.doc_id if d.passage else None)
            for d in packed.dropped] == [("copy", "duplicate", "orig")]


def test_a_document_sharing_a_sentence_keeps_its_new_sentences_and_is_not_dropped() -> None:
    rng = random.Random(31)
    shared = "Vascular endothelial cells produce nitric oxide which is a potent vasodilator substance."
    first = f"{text_of(rng, 2)} {shared} {text_of(rng, 2)}"
    own = text_of(rng, 3)
    second = f"Héron {shared} {own}"  # a non-ASCII head: byte offsets move with the trim
    a = chunk_hits("a", first, size=200)
    b = chunk_hits("b", second, size=200)
    packed = pack(ranked([a[0], b[0]]), {}, budget=2000)
    assert [p.first.doc_id for p in packed.passages] == ["a", "b"] and packed.dropped == []
    trimmed = packed.passages[1]
    start = second.index(own)
    assert (trimmed.text, trimmed.start, trimmed.end, trimmed.cut) == (own, start, len(second), True)
    loc = trimmed.location()
    assert (loc["byte_start"], loc["byte_end"]) == (len(second[:start].encode()), len(second.encode()))


def test_a_chunk_whose_new_words_another_document_holds_does_not_grow_its_passage() -> None:
    rng = random.Random(32)
    text = text_of(rng, 12)
    original = chunk_hits("orig", text, size=24, overlap=8)
    version = chunk_hits("v2", text.replace(" ", "  ", 1), size=24, overlap=8)  # same words, other bytes
    # the copy's chunk 1 comes first; the original's chunk 0 is new text then, and its chunk 1 repeats the copy
    packed = pack(ranked([version[1], original[0], original[1]]), by_doc(original + version), budget=5000)
    assert [(p.first.doc_id, [h.chunk_index for h in p.chunks]) for p in packed.passages] == [
        ("v2", [1]), ("orig", [0])]
    [(doc, index, reason, holder)] = [(d.candidate.hit.doc_id, d.candidate.hit.chunk_index, d.reason,
                                       d.passage.first.doc_id if d.passage else None) for d in packed.dropped]
    assert (doc, index, reason, holder) == ("orig", 1, "duplicate", "v2")


def test_new_documents_go_before_a_distant_second_chunk_of_one_already_in() -> None:
    rng = random.Random(33)
    long_doc = chunk_hits("long", text_of(rng, 30), size=24, overlap=8)
    other = chunk_hits("other", text_of(rng, 2), size=200)
    far = long_doc[6]
    assert far.location["char_start"] > long_doc[0].location["char_end"]  # it meets nothing taken
    c = counter()
    def tokens(*hits: Hit) -> int:
        return asyncio.run(c.count("\n\n".join(f"[{n}] {h.doc_id}\n{h.text}" for n, h in enumerate(hits, 1))))

    two = max(tokens(long_doc[0], far), tokens(long_doc[0], other[0]))  # any two fit, not three
    assert tokens(long_doc[0], far, other[0]) > two
    candidates = ranked([long_doc[0], far, other[0]])
    first = pack(candidates, {}, budget=two)
    assert [(p.first.doc_id, p.first.chunk_index) for p in first.passages] == [("long", 0), ("other", 0)]
    assert [(d.candidate.hit.doc_id, d.candidate.hit.chunk_index, d.reason) for d in first.dropped] == [
        ("long", 6, "budget")]
    by_score = pack(candidates, {}, budget=two, documents_first=False)
    assert [(p.first.doc_id, p.first.chunk_index) for p in by_score.passages] == [("long", 0), ("long", 6)]
    everything = pack(candidates, {}, budget=5000)  # room for all: the waiting chunk is taken after all
    assert [(p.first.doc_id, p.first.chunk_index) for p in everything.passages] == [
        ("long", 0), ("long", 6), ("other", 0)]


def test_a_passage_too_long_is_cut_at_a_sentence_end_or_skipped_for_a_later_one() -> None:
    rng = random.Random(4)
    long_text, short_text = text_of(rng, 10), "Owls hunt at night."
    long_hits = chunk_hits("long", long_text, size=200)
    short_hits = chunk_hits("short", short_text, size=200)
    c = counter()
    budget = asyncio.run(c.count(f"[1] long\n{long_text}")) // 2
    cut = pack(ranked([long_hits[0], short_hits[0]]), {}, budget=budget, overflow="cut")
    first = cut.passages[0]
    assert first.cut and long_text.startswith(first.text) and re.search(r"[.!?]$", first.text)
    assert first.end == first.start + len(first.text)
    skipped = pack(ranked([long_hits[0], short_hits[0]]), {}, budget=budget, overflow="skip")
    assert [p.first.doc_id for p in skipped.passages] == ["short"]
    assert [(d.candidate.hit.doc_id, d.reason) for d in skipped.dropped] == [("long", "budget")]


def test_edges_order_puts_the_best_documents_at_both_ends() -> None:
    rng = random.Random(5)
    hits = [chunk_hits(f"d{i}", text_of(rng, 2), size=200)[0] for i in range(5)]
    packed = pack(ranked(hits), {}, budget=5000, order="edges")
    assert [p.first.doc_id for p in packed.passages] == ["d0", "d2", "d4", "d3", "d1"]
    assert [p.number for p in packed.passages] == [1, 2, 3, 4, 5]
    assert re.findall(r"^\[(\d+)\] (d\d)$", packed.context, re.M) == [("1", "d0"), ("2", "d2"), ("3", "d4"),
                                                                      ("4", "d3"), ("5", "d1")]


TEMPLATES = ["[{number}] {title}\n{text}", "<doc n={number} src='{source}' page={page}>{text}</doc>",
             "{number}. {text}", "Source [{number}] {{{title}}} p.{page}:\n{text}\n---"]


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), budget=st.integers(12, 700), template=st.sampled_from(TEMPLATES),
       neighbours=st.integers(0, 3), order=st.sampled_from(["score", "edges"]),
       overflow=st.sampled_from(["cut", "skip"]), size=st.integers(12, 80))
def test_the_budget_holds_exactly_and_every_passage_is_its_source(
        seed: int, budget: int, template: str, neighbours: int, order: str, overflow: str, size: int) -> None:
    rng = random.Random(seed)
    docs = {f"d{i}": text_of(rng, rng.randint(1, 14)) for i in range(rng.randint(1, 5))}
    if rng.random() < 0.5:  # a copy of one document under another id
        docs["copy"] = docs["d0"]
    if rng.random() < 0.5:  # a document that shares a sentence of another, whose own sentences are kept
        docs["mix"] = f"{text_of(rng, rng.randint(0, 3))} {docs['d0'].split('. ')[0]}. {text_of(rng, 4)}".strip()
    hits = [h for doc_id, text in docs.items() for h in chunk_hits(doc_id, text, size=size, overlap=size // 3)]
    candidates = ranked(rng.sample(hits, rng.randint(1, len(hits))))
    c = counter()
    opts = PackOptions(budget=budget, template=Template.parse(template), neighbours=neighbours,
                       order=order, overflow=overflow)  # type: ignore[arg-type]
    packer = Packer(c, opts)
    packed = asyncio.run(packer.pack(candidates, by_doc(hits)))
    assert asyncio.run(c.count(packed.context)) == packed.tokens <= budget
    seen: dict[str, set[int]] = {}
    for number, p in enumerate(packed.passages, 1):
        assert p.number == number
        source = docs[p.first.doc_id]
        assert p.text == source[p.start:p.end]  # a slice of its source, overlap once
        loc = p.location()
        assert (loc["byte_start"], loc["byte_end"]) == (len(source[:p.start].encode()), len(source[:p.end].encode()))
        indexes = {h.chunk_index for h in p.chunks}
        assert not indexes & seen.get(p.first.doc_id, set())  # no chunk in two passages
        seen.setdefault(p.first.doc_id, set()).update(indexes)
    accounted = [d.candidate.hit.id for d in packed.dropped]
    assert len(accounted) == len(set(accounted))  # each left-out candidate once
    for cand in candidates:  # every candidate is in a passage or left out with a reason, not both
        inside = any(cand.hit.id in {h.id for h in p.chunks} and not any(
            d.candidate is cand and d.reason != "merged" for d in packed.dropped) for p in packed.passages)
        assert inside or cand.hit.id in accounted
