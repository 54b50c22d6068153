"""service/evaluation/context_metrics.py: plain packing and the context report, on hand-built contexts."""

from __future__ import annotations

import pytest

from service.evaluation.context_metrics import (
    Packed,
    PackedPassage,
    context_report,
    format_context_table,
    plain_pack,
    repeated_tokens,
)


def words(s: str) -> int:
    return len(s.split())


def render(number: int, doc_id: str, text: str) -> str:
    return f"[{number}] ({doc_id}) {text}"


def test_plain_pack_fills_the_budget_exactly_and_stops_at_the_first_hit_past_it() -> None:
    hits = [("a", "w w"), ("b", "w w w"), ("c", "w w w w w"), ("d", "w"), ("e", "w")]

    packed = plain_pack(hits, budget=16, render=render, count=words)

    # rendered: 4 + 5 + 7 = 16 tokens; "d" (3 more) would fit a budget of 19 but plain packing stops at "d"
    assert packed == Packed([PackedPassage("a", "w w", 4), PackedPassage("b", "w w w", 5),
                             PackedPassage("c", "w w w w w", 7)], 16, [])
    assert plain_pack(hits, budget=15, render=render, count=words).passages == packed.passages[:2]
    assert plain_pack(hits, budget=15, render=render, count=words).tokens == 9


def test_plain_pack_stops_rather_than_skipping_to_a_shorter_hit() -> None:
    hits = [("a", "w w"), ("long", "w " * 20), ("short", "w")]

    packed = plain_pack(hits, budget=10, render=render, count=words)

    assert [p.doc_id for p in packed.passages] == ["a"] and packed.tokens == 4


def test_plain_pack_counts_the_whole_joined_context_separators_included() -> None:
    def text(number: int, doc_id: str, chunk: str) -> str:
        return chunk

    packed = plain_pack([("a", "abc"), ("b", "de"), ("c", "f")], budget=9, render=text, count=len, separator="--")

    assert [p.tokens for p in packed.passages] == [3, 2] and packed.tokens == len("abc--de") == 7
    assert plain_pack([("a", "abc"), ("b", "de"), ("c", "f")], budget=10, render=text, count=len,
                      separator="--").tokens == len("abc--de--f") == 10
    assert plain_pack([], budget=10, render=text, count=len) == Packed([], 0, [])


def test_repeated_tokens_of_an_overlap_a_copy_and_distinct_text() -> None:
    first = PackedPassage("d", "Alpha beta gamma delta epsilon zeta eta theta", 8)
    overlap = PackedPassage("e", "GAMMA, delta; epsilon zeta (eta) iota kappa lambda mu nu", 10)
    copy = PackedPassage("d~v2", "alpha beta gamma delta epsilon zeta eta theta", 12)
    distinct = PackedPassage("f", "omicron pi rho sigma tau upsilon", 7)
    short = PackedPassage("g", "alpha beta gamma", 4)  # fewer than five words: no 5-gram to repeat

    # overlap: its first five words are a 5-gram of "d", half of its words, half of 10 tokens
    assert repeated_tokens([first, overlap]) == 5
    assert repeated_tokens([first, overlap, copy, distinct, short]) == 5 + 12
    assert repeated_tokens([overlap, first]) == round(5 / 8 * 8)  # order decides which one repeats
    assert repeated_tokens([distinct, distinct]) == 7


QRELS = {
    "q1": {"A": 1, "B": 1, "C": 0},
    "q2": {"D": 1, "E": 2},
    "q3": {"F": 1},  # no context: left out
}
COPIES = {"A~v2": "A", "D~v2": "D"}


def contexts() -> dict[str, Packed]:
    return {
        "q1": Packed(
            [PackedPassage("A~v2", "one two three four five six", 10), PackedPassage("X", "seven eight nine", 8),
             PackedPassage("C", "ten eleven", 2)],
            20,
            # "A": the original of a passage's copy (a true drop); "Y": no passage (wrong);
            # "X": another chunk of a passage's own document (neither)
            ["A", "Y", "X"],
        ),
        "q2": Packed(
            [PackedPassage("D", "alpha beta gamma delta epsilon zeta eta theta", 6),
             PackedPassage("E", "gamma delta epsilon zeta eta iota kappa lambda mu nu", 10)],
            18,
            ["D~v2", "A~v2"],  # a copy of a passage (true), a copy of a document with no passage here (wrong)
        ),
        "q4": Packed([PackedPassage("B", "b", 1)], 1, []),  # not in the qrels: left out
    }


def test_context_report_counts_a_copy_as_its_original() -> None:
    report = context_report(contexts(), QRELS, COPIES, budget=50)

    assert report == {
        "queries": 2.0,
        "distinct_relevant_per_query": (1 + 2) / 2,  # q1: "A~v2" is A; C is judged 0
        "relevant_recall": (1 / 2 + 2 / 2) / 2,
        "tokens_used": 19,
        "tokens_used_share": 19 / 50,
        "repeated_tokens": (0 + 5) / 2,
        "repeated_share_of_budget": 2.5 / 50,
        "copies_dropped": 2.0,
        "wrongly_dropped": 2.0,
    }


def test_without_copies_a_copy_is_a_document_of_its_own() -> None:
    report = context_report(contexts(), QRELS, {}, budget=50)

    assert report["distinct_relevant_per_query"] == (0 + 2) / 2
    assert report["copies_dropped"] == 0.0  # "A" and "D~v2" name documents with no passage
    assert report["wrongly_dropped"] == 4.0


def test_a_document_in_context_twice_counts_once() -> None:
    twice = {"q2": Packed([PackedPassage("D", "x", 3), PackedPassage("D~v2", "y", 3)], 6, [])}

    report = context_report(twice, QRELS, COPIES, budget=12)

    assert report["distinct_relevant_per_query"] == 1.0 and report["relevant_recall"] == 0.5


def test_a_report_needs_one_scored_query() -> None:
    with pytest.raises(ValueError, match="no query"):
        context_report({"q9": Packed([], 0, [])}, QRELS, COPIES, budget=10)


def test_the_table_has_a_line_per_method() -> None:
    report = context_report(contexts(), QRELS, COPIES, budget=50)

    lines = format_context_table({"plain": report, "context": report}).splitlines()

    assert lines[0].split() == ["method", "queries", "rel/query", "recall", "tokens", "tok/budget", "repeated",
                                "rep/budget", "copies", "drop", "wrong", "drop"]
    assert lines[1].split() == ["plain", "2", "1.500", "0.7500", "19.0", "0.380", "2.5", "0.050", "2", "2"]
    assert lines[2].split()[0] == "context" and len(lines) == 3
