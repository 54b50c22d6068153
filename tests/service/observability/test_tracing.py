"""Spans through the real app, recorded by the SDK's in-memory exporter: one per stage, with the collection and
mode, parented under the request's span (or, for indexing, under the batch's)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from service.config import OtelSettings, Settings
from service.observability.tracing import otlp_exporter
from tests.support.app import app_client, wait_for_job
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings

DOCS = [{"id": f"d{i}", "text": t} for i, t in enumerate(["vault keys rotate monthly", "tickets are answered",
                                                          "keys live in the vault"])]
TRACE_ID, PARENT_ID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


async def _seed(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/collections", json={"name": "docs"})).status_code == 201
    assert (await client.post("/v1/collections/docs/documents", json={"documents": DOCS})).status_code == 200


@pytest.mark.parametrize("mode, stages", [("dense", ["embed", "store"]), ("sparse", ["store"]),
                                          ("hybrid", ["embed", "store"])])
async def test_a_search_makes_a_span_per_stage_under_the_request_span(
    minilm_settings: Settings, spans: InMemorySpanExporter, mode: str, stages: list[str]
) -> None:
    async with app_client(minilm_settings) as client:
        r = await _traced_search(client, spans, mode)
    _assert_search_spans(spans, r, mode, stages)


@pytest.mark.parametrize("mode, stages", [("dense", ["embed", "store"]), ("sparse", ["store"]),
                                          ("hybrid", ["embed", "store"])])
async def test_search_spans_with_the_runner_scripted_and_the_store_in_its_process(
    tmp_path: Path, spans: InMemorySpanExporter, mode: str, stages: list[str]
) -> None:
    """The same spans with the embedding runner scripted at the network edge (no vLLM) and the store in its own
    process (the default): tracing stays whole on the path that issue 20 made cheaper."""
    runner = ScriptedEmbedder()
    async with app_client(scripted_settings(tmp_path), transports={"embedding": runner.transport}) as client:
        r = await _traced_search(client, spans, mode)
    _assert_search_spans(spans, r, mode, stages)


async def _traced_search(client: httpx.AsyncClient, spans: InMemorySpanExporter, mode: str) -> httpx.Response:
    await _seed(client)
    spans.clear()
    r = await client.post("/v1/search", json={"collection": "docs", "query": "vault keys", "mode": mode},
                          headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    assert r.status_code == 200, r.text
    return r


def _assert_search_spans(spans: InMemorySpanExporter, r: httpx.Response, mode: str, stages: list[str]) -> None:
    by_name = _by_name(spans.get_finished_spans())
    assert sorted(by_name) == sorted(["POST /v1/search", *stages])
    (request,) = by_name["POST /v1/search"]
    assert request.kind == SpanKind.SERVER
    assert format(request.context.trace_id, "032x") == TRACE_ID  # the caller's trace continues
    assert request.parent is not None and format(request.parent.span_id, "016x") == PARENT_ID
    assert dict(request.attributes or {}) == {"http.request.method": "POST", "url.path": "/v1/search",
                                               "http.route": "/v1/search", "http.response.status_code": 200}
    for name in stages:
        (span,) = by_name[name]
        assert span.parent is not None and span.parent.span_id == request.context.span_id, name
        assert span.context.trace_id == request.context.trace_id
        assert span.attributes is not None
        assert (span.attributes["ragserve.collection"], span.attributes["ragserve.mode"]) == ("docs", mode)
    hits = len(r.json()["hits"])  # BM25 matches the two documents that hold a query term
    assert by_name["store"][0].attributes["ragserve.hits"] == hits == (2 if mode == "sparse" else 3)  # type: ignore[index]


def _rerank(request: httpx.Request) -> httpx.Response:
    n = len(json.loads(request.content)["documents"])
    return httpx.Response(200, json={"results": [{"index": i, "relevance_score": 1 / (i + 2)} for i in range(n)]})


def _generate(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    if request.url.path == "/tokenize":  # the context's budget is counted with the generator's tokenizer
        return httpx.Response(200, json={"count": len(body["prompt"].split()), "max_model_len": 8192, "tokens": []})
    return httpx.Response(200, json={"id": "c1", "object": "chat.completion", "model": body["model"], "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Monthly [1]."}, "finish_reason": "stop"}]})


async def test_grounded_chat_spans_embed_store_rerank_and_generate(
    qwen3_settings: Settings, spans: InMemorySpanExporter
) -> None:
    """The qwen3 stack's real embedding runner; the reranker and the generator answer at the network edge."""
    transports = {"rerank": httpx.MockTransport(_rerank), "generate": httpx.MockTransport(_generate)}
    async with app_client(qwen3_settings, transports=transports) as client:
        await _seed(client)
        spans.clear()
        r = await client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "how often do keys rotate?"}],
            "ragserve": {"collections": ["docs"], "top_k": 2}})
        assert r.status_code == 200, r.text
    by_name = _by_name(spans.get_finished_spans())
    assert sorted(by_name) == ["POST /v1/chat/completions", "embed", "generate", "rerank", "store"]
    (request,) = by_name["POST /v1/chat/completions"]
    for name in ("embed", "store", "rerank", "generate"):
        (span,) = by_name[name]
        assert span.parent is not None and span.parent.span_id == request.context.span_id, name
    assert by_name["rerank"][0].attributes == {"ragserve.collection": "docs", "ragserve.mode": "hybrid",
                                               "ragserve.candidates": 3}
    assert by_name["generate"][0].attributes == {"ragserve.model": r.json()["model"], "ragserve.stream": False}


async def test_each_indexing_batch_is_a_span_with_embed_and_store_children(
    minilm_settings: Settings, spans: InMemorySpanExporter
) -> None:
    records = "\n".join(json.dumps({"_id": d["id"], "text": d["text"]}) for d in DOCS)
    async with app_client(minilm_settings, with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "docs"})).status_code == 201
        spans.clear()
        r = await client.post("/v1/collections/docs/ingest", files={"files": ("r.jsonl", records.encode())})
        job = await wait_for_job(client, r.json()["id"])
        assert job["state"] == "succeeded", job
    by_name = _by_name(spans.get_finished_spans())
    (batch,) = by_name["index_batch"]
    assert batch.parent is None  # the worker's own trace, not the submitting request's
    assert dict(batch.attributes or {}) == {
        "ragserve.collection": "docs", "ragserve.job": job["id"], "ragserve.documents": 3, "ragserve.chunks": 3,
        "ragserve.tokens": job["counts"]["tokens"], "ragserve.failed": False}
    for name in ("embed", "store"):
        (span,) = [s for s in by_name[name] if s.parent is not None and s.parent.span_id == batch.context.span_id]
        assert span.attributes is not None and span.attributes["ragserve.attempt"] == 1


def test_otlp_export_follows_the_setting_or_the_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert otlp_exporter(OtelSettings()) is None
    exporter = otlp_exporter(OtelSettings(endpoint="http://collector:4318/"))
    assert exporter is not None and exporter._endpoint == "http://collector:4318/v1/traces"  # type: ignore[attr-defined]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel.internal:4318")
    exporter = otlp_exporter(OtelSettings())
    assert exporter is not None and exporter._endpoint == "http://otel.internal:4318/v1/traces"  # type: ignore[attr-defined]


def _recorded(span: ReadableSpan) -> tuple[object, ...]:
    return (span.name, dict(span.attributes or {}), span.status.status_code, span.status.description,
            [(e.name, dict(e.attributes or {})) for e in span.events if e.name != "exception"] +
            [(e.name, e.attributes["exception.type"], e.attributes["exception.message"])  # type: ignore[index]
             for e in span.events if e.name == "exception"],
            span.parent.span_id if span.parent else None, span.end_time is not None)


def test_a_stage_records_what_start_as_current_span_records(spans: InMemorySpanExporter) -> None:
    """``stage`` opens its span with ``start_span`` and ``use_span`` (cheaper than ``start_as_current_span``):
    the same span, parented the same way, ended, with a failure recorded on it as an error and an event."""
    from opentelemetry import trace

    from service.observability.tracing import stage, tracer

    def run(opened: object) -> list[tuple[object, ...]]:
        spans.clear()
        with tracer.start_as_current_span("request") as parent:
            with pytest.raises(ValueError, match="no runner"):
                with opened("embed", collection="kb", mode=None) as span:  # type: ignore[operator]
                    assert trace.get_current_span() is span
                    raise ValueError("no runner")
            with opened("store", collection="kb", limit=3):  # type: ignore[operator]
                pass
        out = [_recorded(s) for s in spans.get_finished_spans()]
        assert [s.parent.span_id for s in spans.get_finished_spans()[:2]] == [parent.get_span_context().span_id] * 2
        return [o[:5] + (o[5] is not None, o[6]) for o in out]

    def reference(name: str, **attributes: object) -> object:
        return tracer.start_as_current_span(
            name, attributes={f"ragserve.{k}": v for k, v in attributes.items() if v is not None})

    got = run(stage)
    assert got == run(reference)
    assert got[0][:4] == ("embed", {"ragserve.collection": "kb"}, trace.StatusCode.ERROR, "ValueError: no runner")
    assert got[0][4] == [("exception", "ValueError", "no runner")]
