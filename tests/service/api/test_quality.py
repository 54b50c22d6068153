"""Search ids, feedback, the query log and the quality series through the API, on the real minilm stack (runner,
Qdrant Edge): what each way in returns, each refusal's code, each series moved by the search that should move
it, and tenants kept apart in the log."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from service.auth.keys import sha256_hex
from service.config import Settings
from service.config.keys import ApiKeyEntry
from service.profiles import QWEN3
from tests.support.app import app_client
from tests.support.scripted_runner import ScriptedRunner, scripted_settings

SEARCH_ID = re.compile(r"^s_[0-9a-f]{32}$")
DOCS = [
    {"id": "vault", "text": "Vault keys are rotated every month by the security team", "metadata": {"lang": "en"}},
    {"id": "tea", "text": "Green tea is brewed at eighty degrees for two minutes", "metadata": {"lang": "en"}},
    {"id": "bike", "text": "A bicycle chain needs oil every few hundred kilometres", "metadata": {"lang": "en"}},
]
KEYS = {"a": "tenant-a-key-0123456789abcdef", "b": "tenant-b-key-0123456789abcdef"}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


async def seed(client: httpx.AsyncClient, headers: dict[str, str] | None = None) -> None:
    r = await client.post("/v1/collections", json={"name": "kb", "filter_fields": {"lang": "keyword"}})
    assert r.status_code == 201, r.text
    r = await client.post("/v1/collections/kb/documents", json={"documents": DOCS}, headers=headers or {})
    assert r.status_code == 200, r.text


async def test_each_way_in_returns_a_server_made_id_and_feedback_checks_it(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        await seed(client)
        ids = []
        for _ in range(2):
            r = await client.post("/v1/search", json={"collection": "kb", "query": "rotating vault keys", "top_k": 2},
                                  headers={"X-Request-ID": "chosen-by-the-caller"})
            assert r.status_code == 200, r.text
            ids.append(r.json()["search_id"])
        assert all(SEARCH_ID.match(i) for i in ids) and ids[0] != ids[1]  # the caller's id never serves
        hits = r.json()["hits"]
        assert [h["doc_id"] for h in hits] == ["vault", hits[1]["doc_id"]]

        r = await client.post("/v1/feedback", json={"search_id": ids[1], "chunk_id": hits[0]["id"], "rating": 3})
        assert r.status_code == 200, r.text
        assert r.json() == {"search_id": ids[1], "collection": "kb", "chunk_id": hits[0]["id"], "doc_id": "vault",
                            "rating": 3, "stored": False}  # the log is off: counted, not kept

        refusals = [
            ({"search_id": "s_" + "0" * 32, "doc_id": "vault", "rating": 1}, 404, "search_not_found", "search_id"),
            ({"search_id": ids[1], "doc_id": "bike-or-not", "rating": 1}, 422, "hit_not_in_search", "doc_id"),
            ({"search_id": ids[1], "doc_id": "vault", "rating": 4}, 422, "rating_out_of_range", "rating"),
            ({"search_id": ids[1], "doc_id": "vault", "rating": -2}, 422, "rating_out_of_range", "rating"),
            ({"search_id": ids[1], "rating": 1}, 422, "no_hit_named", "chunk_id"),
            ({"search_id": ids[1], "doc_id": "vault", "rating": 1, "comment": "x" * 1001}, 422, "comment_too_long",
             "comment"),
        ]
        for body, status, code, param in refusals:
            r = await client.post("/v1/feedback", json=body)
            assert (r.status_code, r.json()["error"]["code"], r.json()["error"]["param"]) == (status, code, param)

        r = await client.post("/v1/context", json={"collection": "kb", "query": "green tea", "budget_tokens": 200})
        assert r.status_code == 200, r.text
        context = r.json()
        assert SEARCH_ID.match(context["search_id"])
        first = context["passages"][0]
        r = await client.post("/v1/feedback", json={"search_id": context["search_id"], "doc_id": first["doc_id"],
                                                    "rating": -1})
        assert (r.status_code, r.json()["doc_id"]) == (200, first["doc_id"]), r.text
        metrics = samples((await client.get("/metrics")).text)
    assert metrics[("ragserve_feedback_total", (("collection", "kb"), ("rating", "3")))] == 1
    assert metrics[("ragserve_feedback_total", (("collection", "kb"), ("rating", "-1")))] == 1


async def test_each_quality_series_moves_with_the_search_that_should_move_it(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        await seed(client)
        tops = []
        for query, top_k, filter_ in (
            (DOCS[0]["text"], 3, None),  # its own text: cosine near 1
            ("zq xv kj wp", 3, None),  # letters that mean nothing: a low top score
            ("vault keys", 3, {"lang": "fr"}),  # a filter that matches nothing
        ):
            body = {"collection": "kb", "query": query, "top_k": top_k, "mode": "dense"}
            if filter_ is not None:
                body["filter"] = filter_
            r = await client.post("/v1/search", json=body)
            assert r.status_code == 200, r.text
            tops.append(r.json()["hits"][0]["vector_score"] if r.json()["hits"] else None)
        metrics = samples((await client.get("/metrics")).text)
    kb = (("collection", "kb"), ("mode", "dense"))
    assert tops[0] > 0.9 and tops[1] < 0.3 and tops[2] is None
    assert metrics[("ragserve_searches_total", kb)] == 3
    assert metrics[("ragserve_search_zero_hits_total", (("collection", "kb"), ("restricted", "true")))] == 1
    assert metrics[("ragserve_search_zero_hits_total", (("collection", "kb"), ("restricted", "false")))] == 0
    assert metrics[("ragserve_search_low_score_total", kb)] == 1
    assert metrics[("ragserve_search_top_score_count", kb)] == 2
    assert abs(metrics[("ragserve_search_top_score_sum", kb)] - (tops[0] + tops[1])) < 1e-9


def tenant_settings(settings: Settings) -> Settings:
    settings.api_key_hashes = [
        ApiKeyEntry(id=f"tenant-{t}", sha256=sha256_hex(k), scopes=["read", "write"],
                    tenant={"field": "org", "value": t})
        for t, k in KEYS.items()
    ]
    settings.query_log.enabled = True
    return settings


async def test_a_tenant_reads_only_its_log_rows_and_rates_only_its_searches(minilm_settings: Settings) -> None:
    a, b = ({"Authorization": f"Bearer {KEYS[t]}"} for t in ("a", "b"))
    async with app_client(tenant_settings(minilm_settings)) as client:
        await seed(client, a)
        await client.post("/v1/collections/kb/documents", json={"documents": DOCS}, headers=b)
        searched = {}
        for name, headers in (("a", a), ("b", b)):
            r = await client.post("/v1/search", headers=headers,
                                  json={"collection": "kb", "query": f"tenant {name} asks about tea", "top_k": 1})
            assert r.status_code == 200, r.text
            searched[name] = r.json()
        hit_a = searched["a"]["hits"][0]["id"]
        r = await client.post("/v1/feedback", headers=b, json={"search_id": searched["a"]["search_id"],
                                                               "chunk_id": hit_a, "rating": -1})
        assert (r.status_code, r.json()["error"]["code"]) == (403, "search_of_another_tenant")
        r = await client.post("/v1/feedback", headers=a, json={"search_id": searched["a"]["search_id"],
                                                               "chunk_id": hit_a, "rating": 2, "comment": "good"})
        assert r.status_code == 200 and r.json()["stored"] is True, r.text

        logs = {}
        for name, headers in (("a", a), ("b", b), ("admin", {})):
            r = await client.get("/v1/querylog", headers=headers)
            assert r.status_code == 200, r.text
            logs[name] = r.json()["rows"]
        assert [(row["query"], row["tenant"]) for row in logs["a"]] == [("tenant a asks about tea", "org=a")]
        assert [row["feedback"] for row in logs["a"]] == [[{
            "key_id": "tenant-a", "collection": "kb", "chunk_id": hit_a, "doc_id": "tea", "rating": 2,
            "comment": "good", "created_at": logs["a"][0]["feedback"][0]["created_at"]}]]
        assert [row["query"] for row in logs["b"]] == ["tenant b asks about tea"]
        assert sorted(row["tenant"] for row in logs["admin"]) == ["org=a", "org=b"]

        r = await client.delete("/v1/querylog", params={"tenant": "org=a"}, headers=a)
        assert (r.status_code, r.json()["error"]["code"]) == (403, "insufficient_scope")
        r = await client.delete("/v1/querylog", params={"tenant": "org=a"})
        assert r.json() == {"tenant": "org=a", "rows": 1}
        r = await client.get("/v1/querylog")
        assert [row["tenant"] for row in r.json()["rows"]] == ["org=b"]
        r = await client.post("/v1/feedback", headers=a, json={"search_id": searched["a"]["search_id"],
                                                               "chunk_id": hit_a, "rating": 2})
        assert r.status_code == 404  # its record went with the tenant's rows


async def test_a_rerank_that_changes_the_top_hit_is_counted(tmp_path: Path) -> None:
    """Which hit the reranker puts first is the claim, not the reranker's weights: the runners are scripted at
    the network edge. One reranked search keeps the search's top hit first, the other puts another hit first."""
    runner = ScriptedRunner(dimensions=QWEN3.embedding.dimensions)
    async with app_client(scripted_settings(tmp_path, profile="qwen3"), transports=runner.transports) as client:
        await seed(client)
        plain = await client.post("/v1/search", json={"collection": "kb", "query": "vault keys", "top_k": 3,
                                                      "mode": "dense", "rerank": {"enabled": False}})
        order = [h["text"] for h in plain.json()["hits"]]
        tops = []
        for scores in ((0.9, 0.5, 0.1), (0.1, 0.5, 0.9)):  # the search's order kept, then reversed
            by_text = dict(zip(order, scores, strict=True))
            runner.rerank_score = lambda query, text, by_text=by_text: by_text[text]
            r = await client.post("/v1/search", json={"collection": "kb", "query": "vault keys", "top_k": 3,
                                                      "mode": "dense", "rerank": {"enabled": True}})
            assert r.status_code == 200, r.text
            tops.append(r.json()["hits"][0]["text"])
        metrics = samples((await client.get("/metrics")).text)
    assert tops == [order[0], order[2]]
    kb = (("collection", "kb"),)
    assert metrics[("ragserve_search_reranked_total", kb)] == 2
    assert metrics[("ragserve_search_rerank_top_changed_total", kb)] == 1
    assert metrics[("ragserve_search_top_rerank_score_count", kb)] == 2
    assert abs(metrics[("ragserve_search_top_rerank_score_sum", kb)] - 1.8) < 1e-6
    assert metrics[("ragserve_search_low_score_total", (("collection", "kb"), ("mode", "rerank")))] == 0
