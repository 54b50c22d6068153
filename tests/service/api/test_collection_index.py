"""The collection description's ``index`` (the embedded store's background builds) as the API shapes it."""

from __future__ import annotations

from dataclasses import fields

from service.api.routes.collections import _out
from service.api.schemas.collections import IndexStatusOut
from service.store.types import CollectionInfo, IndexStatus


def test_the_wire_index_status_has_the_stores_fields() -> None:
    assert set(IndexStatusOut.model_fields) == {f.name for f in fields(IndexStatus)}


def test_a_described_collection_carries_its_index_status_and_a_listed_one_none() -> None:
    status = IndexStatus(indexed=900, unindexed=12, build="failed", reason="the builder process exited with 1",
                         last_ended="2026-12-06T23:00:00+00:00", last_built="hnsw")
    info = CollectionInfo("c", 16, 912, "m", {}, index=status)
    assert _out(info).model_dump()["index"] == {
        "indexed": 900, "unindexed": 12, "build": "failed", "phase": None,
        "reason": "the builder process exited with 1", "last_ended": "2026-12-06T23:00:00+00:00",
        "last_built": "hnsw"}
    assert _out(CollectionInfo("c", 16, 912, "m", {})).index is None
