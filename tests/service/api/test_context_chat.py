"""/v1/context with a generator, and grounded chat on top of it, through the real stack: the tiny Qwen3 embedding
and reranker runners, the tiny Qwen3-VL generator (vLLM), ingest jobs with the in-process worker, Qdrant Edge.
The tiny generator's words are random: these tests hold the wiring (what is sent, what is returned, which
passage a number names), not the words. Faults are injected at the generator's network edge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from service.config import Settings
from service.context.rewrite import REWRITE_PROMPT_VERSION, REWRITE_SYSTEM_PROMPT
from tests.service.api.test_context import FILES, _indexed
from tests.support.app import app_client
from tests.support.recording import RecordingTransport

QUESTION = "What happens to the lift of delta wings at high angles of attack?"
FOLLOW_UP = [{"role": "user", "content": "How does a slender body behave in supersonic flow?"},
             {"role": "assistant", "content": "It carries a conical shock [1]."},
             {"role": "user", "content": "and what about its transition?"}]
RULE = "How does a slender body behave in supersonic flow?\nand what about its transition?"


async def _tokenize(url: str, model: str, text: str) -> int:
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.post(f"{url}/tokenize", json={"model": model, "prompt": text, "add_special_tokens": False})
        return int(r.json()["count"])


async def test_a_chat_citation_names_the_passage_context_returns(vl_settings: Settings, tmp_path: Path,
                                                               tiny_qwen3: Path) -> None:
    root = tmp_path / "files"
    root.mkdir()
    vl_settings.ingest.allowed_roots = [tmp_path]
    vl_settings.indexer.tokenizer_path = str(tiny_qwen3)  # the chunker counts with the served tiny model's
    async with app_client(vl_settings, with_worker=True) as client:
        texts = await _indexed(client, root)
        messages = [{"role": "user", "content": QUESTION}]
        r = await client.post("/v1/chat/completions", json={
            "messages": messages, "max_tokens": 8, "temperature": 0,
            "ragserve": {"collections": ["kb"], "top_k": 4}})
        assert r.status_code == 200, r.text
        chat = r.json()["ragserve"]
        r = await client.post("/v1/context", json={
            "collection": "kb", "messages": messages, "budget_tokens": chat["retrieval"]["budget_tokens"],
            "max_passages": 4})
        assert r.status_code == 200, r.text
        context = r.json()
        generator = client.services.generator.model.name  # type: ignore[attr-defined]
    # the budget is counted with the generator's tokenizer, as its runner counts
    assert context["tokenizer"] == chat["retrieval"]["tokenizer"] == generator
    assert context["tokens"] == await _tokenize(vl_settings.runners.generate_url, generator, context["context"])
    assert context["passages"]
    cited = [(c["number"], c["doc_id"], c["chunk_indexes"], c["text"], c["offsets"]["char_start"],
              c["offsets"]["char_end"]) for c in chat["citations"]]
    passages = [(p["number"], p["doc_id"], p["chunk_indexes"], p["text"], p["location"]["char_start"],
                 p["location"]["char_end"]) for p in context["passages"]]
    assert cited == passages  # [n] in the answer is passage n of /v1/context for this conversation
    for _, doc_id, _, text, start, end in passages:
        assert text == texts[doc_id][start:end]
    assert set(FILES) >= {p["doc_id"] for p in context["passages"]}


async def test_the_rewrite_goes_out_with_the_versioned_prompt_and_its_answer_is_searched(
        vl_settings: Settings, tmp_path: Path, tiny_qwen3: Path) -> None:
    root = tmp_path / "files"
    root.mkdir()
    vl_settings.ingest.allowed_roots = [tmp_path]
    vl_settings.indexer.tokenizer_path = str(tiny_qwen3)
    recorder = RecordingTransport()
    async with app_client(vl_settings, with_worker=True, transports={"generate": recorder}) as client:
        await _indexed(client, root)
        r = await client.post("/v1/context", json={"collection": "kb", "messages": FOLLOW_UP, "budget_tokens": 300})
        off = await client.post("/v1/context", json={"collection": "kb", "messages": FOLLOW_UP, "budget_tokens": 300,
                                                     "rewrite": False})
    assert r.status_code == 200, r.text
    rewrites = [(sent, answered) for sent, answered in recorder.exchanges
                if sent.get("messages", [{}])[0].get("content") == REWRITE_SYSTEM_PROMPT]
    assert len(rewrites) == 1  # one rewrite, and none for the request that turned it off
    sent, answered = rewrites[0]
    assert sent["temperature"] == 0.0 and sent["messages"][1]["content"] == (
        "Conversation:\nUser: How does a slender body behave in supersonic flow?\n"
        "Assistant: It carries a conical shock [1].\nUser: and what about its transition?\n\nStandalone question:")
    written = " ".join(answered["choices"][0]["message"]["content"].split())
    body = r.json()
    if written:  # the tiny model's words are random: it may write nothing, and then the rule is used
        assert (body["query_used"], body["query_rewrite"]) == (
            written, {"used": True, "fallback": None, "prompt_version": REWRITE_PROMPT_VERSION})
    else:
        assert (body["query_used"], body["query_rewrite"]["fallback"]) == (RULE, "empty")
    assert "rewrite" in body["timings_ms"]
    assert (off.json()["query_used"], off.json()["query_rewrite"]) == (RULE, None)


def _generator(answer: str | None) -> httpx.MockTransport:
    """A generator that answers chat completions with ``answer`` (None: a 500) and counts tokens by words."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": len(body["prompt"].split()), "max_model_len": 8192,
                                             "tokens": []})
        if answer is None:
            return httpx.Response(500, json={"error": {"message": "boom"}})
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        return httpx.Response(200, json={"id": "c", "object": "chat.completion", "model": body["model"],
                                         "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

    return httpx.MockTransport(handle)


async def test_an_empty_or_failed_rewrite_falls_back_to_the_rule(qwen3_settings: Settings) -> None:
    docs = [{"id": "cone", "text": "Boundary layer transition on a slender cone in supersonic flow."}]
    qwen3_settings.upstream.retries = 0
    cases = (("   ", "empty"), (None, "failed: generation_unavailable"), ("x" * 5000, "too_long"))
    for i, (answer, fallback) in enumerate(cases):
        async with app_client(qwen3_settings, transports={"generate": _generator(answer)}) as client:
            assert (await client.post("/v1/collections", json={"name": f"kb{i}"})).status_code == 201
            r = await client.post(f"/v1/collections/kb{i}/documents", json={"documents": docs})
            assert r.status_code == 200, r.text
            r = await client.post("/v1/context", json={"collection": f"kb{i}", "messages": FOLLOW_UP,
                                                       "budget_tokens": 200})
        assert r.status_code == 200, r.text
        assert (r.json()["query_used"], r.json()["query_rewrite"]) == (
            RULE, {"used": False, "fallback": fallback, "prompt_version": REWRITE_PROMPT_VERSION})


async def test_a_budget_past_the_generators_window_is_refused(qwen3_settings: Settings) -> None:
    async with app_client(qwen3_settings, transports={"generate": _generator("ok")}) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        window = qwen3_settings.generation.max_model_len
        r = await client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "how long is it?"}], "max_tokens": 100,
            "ragserve": {"collections": ["kb"], "budget_tokens": window - 100}})
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert (error["code"], error["param"]) == ("context_window_exceeded", "ragserve.budget_tokens")
        assert f"window of {window} tokens" in error["message"]
