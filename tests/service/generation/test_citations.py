from __future__ import annotations

from typing import Any

from service.context.passages import Candidate, Passage, single
from service.generation.citations import build_citations, mark_cited
from service.store.types import Hit


def _passage(collection: str, doc: str, text: str, metadata: dict[str, Any], score: float, number: int,
             location: dict[str, Any] | None = None) -> Passage:
    p = single(Candidate(collection, Hit(id=f"id-{doc}", score=score, doc_id=doc, chunk_index=2, text=text,
                                         metadata=metadata, location=location), score, score))
    p.number = number
    return p


def test_numbering_and_offsets_are_the_passages() -> None:
    passages = [
        _passage("a", "d1", "x" * 50, {"char_start": 10, "char_end": 60, "page": 4}, 0.9, 1),
        _passage("b", "d2", "y" * 50, {"page": "iv"}, 0.8, 2, location={"byte_start": 0, "byte_end": 50,
                                                                       "headings": ["H"]}),
        _passage("a", "d3", "z" * 12, {}, 0.7, 3, location={"char_start": 5, "char_end": 17, "byte_start": 5,
                                                              "byte_end": 17, "page": 1}),
    ]
    citations = build_citations(passages)
    assert [(c.number, c.collection, c.doc_id) for c in citations] == [(1, "a", "d1"), (2, "b", "d2"), (3, "a", "d3")]
    assert citations[0].offsets == {"char_start": 10, "char_end": 60} and citations[0].page == 4
    assert citations[1].offsets == {"byte_start": 0, "byte_end": 50} and citations[1].page is None
    assert citations[2].offsets == {"char_start": 5, "char_end": 17, "byte_start": 5, "byte_end": 17}
    assert citations[0].to_dict()["chunk_index"] == 2 and citations[1].to_dict()["offsets"] == {"byte_start": 0, "byte_end": 50}
    assert citations[1].to_dict()["headings"] == ["H"] and citations[2].to_dict()["chunk_indexes"] == [2]


def test_cited_marks_follow_the_answer() -> None:
    citations = build_citations([_passage("a", f"d{i}", "t", {}, 1.0, i + 1) for i in range(3)])
    mark_cited(citations, "Reset it [1][3]. See also [12].")
    assert [c.cited for c in citations] == [True, False, True]


def test_slides_sheets_and_rows_travel_with_the_citation() -> None:
    passages = [_passage("a", "deck.pptx", "t", {}, 1.0, 1, location={"char_start": 0, "char_end": 1, "slide": 3}),
                _passage("a", "q.xlsx", "t", {}, 0.9, 2, location={"headings": ["Q1"], "sheet": "Q1", "rows": [2, 9]})]
    citations = build_citations(passages)
    assert citations[0].to_dict()["slide"] == 3 and "sheet" not in citations[0].to_dict()
    assert {k: citations[1].to_dict()[k] for k in ("headings", "sheet", "rows")} == {
        "headings": ["Q1"], "sheet": "Q1", "rows": [2, 9]}
