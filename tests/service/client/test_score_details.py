"""The client's ``search(score_details=True)``: its typed hits carry the server's dense and BM25 scores (against
the real service on loopback, a scripted embedding runner and Qdrant Edge); without it, nothing more is sent."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from service.client import Client, Document
from tests.support.app import API_KEY
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings
from tests.support.server import live_server

DOCS = [
    Document("espresso", "Espresso forces hot water through finely ground coffee."),
    Document("tea", "Green tea is steeped at about eighty degrees."),
    Document("bread", "Sourdough bread rises with a wild yeast starter."),
]
QUERY = "espresso coffee"


def test_hits_carry_dense_and_bm25_scores_when_asked(tmp_path: Path) -> None:
    sent: list[dict[str, object]] = []
    settings = scripted_settings(tmp_path)
    settings.qdrant.edge_process = False
    with live_server(settings, transports={"embedding": ScriptedEmbedder().transport}) as url, \
            httpx.Client(base_url=url, event_hooks={"request": [lambda r: sent.append(json.loads(r.content or b"{}"))]}) \
            as http, Client(api_key=API_KEY, http_client=http) as rs:
        rs.create_collection("kb")
        rs.upsert_documents("kb", DOCS)
        sent.clear()
        detailed = rs.search("kb", QUERY, top_k=3, mode="hybrid", score_details=True)
        plain = rs.search("kb", QUERY, top_k=3, mode="hybrid")
        dense = {h.id: h.vector_score for h in rs.search("kb", QUERY, top_k=3, mode="dense").hits}
        bm25 = {h.id: h.vector_score for h in rs.search("kb", QUERY, top_k=3, mode="sparse").hits}
    assert sent[0] == {"collection": "kb", "top_k": 3, "query": QUERY, "mode": "hybrid", "score_details": True}
    assert "score_details" not in sent[1]
    assert set(bm25) == {h.id for h in detailed.hits if h.doc_id == "espresso"}  # the only one with a query term
    for hit in detailed.hits:
        assert hit.dense_score == pytest.approx(dense[hit.id], abs=1e-5)
        assert hit.bm25_score == (pytest.approx(bm25[hit.id], abs=1e-5) if hit.id in bm25 else None)
    assert [(h.dense_score, h.bm25_score) for h in plain.hits] == [(None, None)] * 3
