"""Translate ragserve's small filter language into a Qdrant filter.

A filter is a mapping of field to condition, all of which must hold::

    {"year": 2020}                      equality (string, integer or boolean)
    {"source": ["a", "b"]}              any of
    {"year": {"gte": 2018, "lt": 2021}} range (gt, gte, lt, lte)
    {"doc_id": "d1"}                    the document id itself (every other key is a metadata field)
"""

from __future__ import annotations

import re
from typing import Any

from service.errors import InvalidInput
from service.store.types import Condition, Filter, Match, MatchAny, Range

FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}(\.[A-Za-z_][A-Za-z0-9_\-]{0,63}){0,3}$")
RANGE_KEYS = {"gt", "gte", "lt", "lte"}


def build_filter(spec: dict[str, Any] | None) -> Filter | None:
    if not spec:
        return None
    conditions: list[Condition] = []
    for field, condition in spec.items():
        if not FIELD_RE.match(field):
            raise InvalidInput(f"invalid filter field {field!r}", code="invalid_filter", param="filter")
        key = "doc_id" if field == "doc_id" else f"metadata.{field}"
        conditions.append(_condition(key, field, condition))
    return Filter(must=tuple(conditions))


def _condition(key: str, field: str, condition: Any) -> Condition:
    if _scalar(condition):
        return Match(key, condition)
    if isinstance(condition, list) and condition and all(_scalar(v) and not isinstance(v, bool) for v in condition):
        if len({type(v) for v in condition}) == 1:
            return MatchAny(key, tuple(condition))
    if isinstance(condition, dict) and condition and set(condition) <= RANGE_KEYS:
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in condition.values()):
            return Range(key, **condition)
    raise InvalidInput(
        f"filter on {field!r} must be a value, a non-empty list of values of one type, "
        "or a range object with gt/gte/lt/lte numbers",
        code="invalid_filter",
        param="filter",
    )


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, bool)) and not isinstance(value, float)
