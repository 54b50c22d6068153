from __future__ import annotations

from service.generation.citations import build_citations, mark_cited
from service.search.service import RankedHit
from service.store.types import Hit


def _hit(doc: str, text: str, metadata: dict, score: float, location: dict | None = None) -> RankedHit:
    return RankedHit(Hit(id=f"id-{doc}", score=score, doc_id=doc, chunk_index=2, text=text, metadata=metadata,
                         location=location), score, score)


def test_numbering_offsets_and_budget() -> None:
    ranked = [
        ("a", _hit("d1", "x" * 50, {"char_start": 10, "char_end": 60, "page": 4}, 0.9)),
        ("b", _hit("d2", "y" * 50, {"page": "iv"}, 0.8, location={"byte_start": 0, "byte_end": 50, "headings": ["H"]})),
        ("a", _hit("d3", "z" * 50, {}, 0.7)),
    ]
    citations, passages = build_citations(ranked, max_chars=80)
    assert [(c.number, c.collection, c.doc_id) for c in citations] == [(1, "a", "d1"), (2, "b", "d2")]
    assert citations[0].offsets == {"char_start": 10, "char_end": 60} and citations[0].page == 4
    assert citations[1].offsets == {"byte_start": 0, "byte_end": 50} and citations[1].page is None
    assert [len(p.text) for p in passages] == [50, 30]  # the second is cut at the budget, the third left out
    assert citations[0].to_dict()["chunk_index"] == 2 and citations[1].to_dict()["offsets"] == {"byte_start": 0, "byte_end": 50}
    assert citations[1].to_dict()["headings"] == ["H"]


def test_cited_marks_follow_the_answer() -> None:
    citations, _ = build_citations([("a", _hit(f"d{i}", "t", {}, 1.0)) for i in range(3)], max_chars=100)
    mark_cited(citations, "Reset it [1][3]. See also [12].")
    assert [c.cited for c in citations] == [True, False, True]
