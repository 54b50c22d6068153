from __future__ import annotations

import pytest

from service.errors import InvalidInput
from service.search.filters import build_filter
from service.store.types import Filter, Match, MatchAny, Range


def test_empty_filter_is_none() -> None:
    assert build_filter(None) is None and build_filter({}) is None


def test_translation() -> None:
    f = build_filter({"year": 2020, "tag": ["a", "b"], "score": {"gte": 0.5, "lt": 2}, "doc_id": "d1"})
    assert f == Filter(must=(
        Match("metadata.year", 2020),
        MatchAny("metadata.tag", ("a", "b")),
        Range("metadata.score", gte=0.5, lt=2),
        Match("doc_id", "d1"),
    ))


@pytest.mark.parametrize("spec", [
    {"year": 1.5}, {"year": []}, {"year": [1, "a"]}, {"year": {"near": 3}}, {"year": {"gte": "x"}},
    {"bad field": 1}, {"a..b": 1}, {"x": None}, {"x": {"gte": True}},
])
def test_invalid_filters_are_refused(spec: dict) -> None:
    with pytest.raises(InvalidInput) as exc:
        build_filter(spec)
    assert exc.value.code == "invalid_filter"
