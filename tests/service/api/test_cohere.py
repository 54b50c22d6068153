"""Cohere's official SDK, unmodified, against the live ragserve: ``cohere.Client`` (``/v1/rerank``) and
``cohere.ClientV2`` (``/v2/rerank``) on the tiny Qwen3 reranker runner, through ragserve's own reranker path.

What reached the runner is recorded at the network edge (the transport still talks to the real runner): the
served model name, the profile's instruction in ``chat_template_kwargs``, every document scored (ragserve picks
the ``top_n``), a cut only where a document may pass it. What the SDK user gets back is the runner's scores in
the runner's order, and for a refusal the exception's ``body`` carries ragserve's envelope: the reason and the
field at fault."""

from __future__ import annotations

from typing import Any

import cohere
import httpx
import pytest

from service.config import Settings
from service.profiles import QWEN3
from tests.support.app import API_KEY, app_client
from tests.support.recording import RecordingTransport
from tests.support.runners import RunnerURLs
from tests.support.server import live_server

MODEL = QWEN3.reranker.name
INSTRUCTION = {"instruction": QWEN3.reranker.default_instruction}
QUERY = "how is espresso made?"
TEXTS = ["The quick brown fox jumps over the lazy dog", "Espresso is brewed by forcing hot water through coffee",
         "Proteins and genes regulate cells"]
OBJECTS = [{"title": "Foxes", "text": TEXTS[0], "id": "a"}, {"title": "Coffee", "text": TEXTS[1], "id": "b"}]
LONG = " ".join(f"espresso{i % 31} crema pressure grind{i % 7}" for i in range(20))


def _ranked(answer: dict[str, Any]) -> list[tuple[int, float]]:
    """The runner's scores, highest first (ties in the runner's order)."""
    pairs = [(r["index"], r["relevance_score"]) for r in answer["results"]]
    return sorted(pairs, key=lambda pair: -pair[1])


def _sdk_error(exc: cohere.core.ApiError, status: int, code: str, message: str, param: str | None) -> None:
    assert exc.status_code == status
    error = {"type": "invalid_request", "code": code, "message": message}
    assert {k: v for k, v in exc.body["error"].items() if k != "details"} == (
        error if param is None else {**error, "param": param})
    assert repr(message) in str(exc)  # what a user printing the exception reads (the body, as Python prints it)


def test_the_v1_client(qwen3_settings: Settings) -> None:
    recorder = RecordingTransport()
    with live_server(qwen3_settings, transports={"rerank": recorder}) as url, httpx.Client(timeout=120) as http:
        co = cohere.Client(api_key=API_KEY, base_url=url, max_retries=0, httpx_client=http)
        plain = co.rerank(query=QUERY, documents=TEXTS, top_n=2)
        fields = co.rerank(query=QUERY, documents=OBJECTS, rank_fields=["title", "text"], return_documents=True,
                           model="rerank-english-v3.0", max_chunks_per_doc=1)
        strings = co.rerank(query=QUERY, documents=[TEXTS[2], {"text": TEXTS[1]}], return_documents=True, top_n=9)
        with pytest.raises(cohere.UnprocessableEntityError) as chunks:
            co.rerank(query=QUERY, documents=TEXTS, max_chunks_per_doc=10)
        with pytest.raises(cohere.UnprocessableEntityError) as missing:
            co.rerank(query=QUERY, documents=[OBJECTS[0], TEXTS[1]], rank_fields=["title"])
        with pytest.raises(cohere.UnauthorizedError) as wrong_key:
            cohere.Client(api_key="wrong-key-0123456789", base_url=url, max_retries=0, httpx_client=http).rerank(
                query=QUERY, documents=TEXTS)
    (sent_plain, answer_plain), (sent_fields, answer_fields), (sent_strings, answer_strings) = recorder.exchanges
    assert sent_plain == {"model": MODEL, "query": QUERY, "documents": TEXTS, "top_n": 3,
                          "chat_template_kwargs": INSTRUCTION}
    assert [(r.index, r.relevance_score, r.document) for r in plain.results] == [
        (i, score, None) for i, score in _ranked(answer_plain)[:2]]
    assert plain.meta is not None and plain.meta.api_version is not None and plain.meta.tokens is not None
    assert plain.meta.api_version.version == "1"
    assert plain.meta.tokens.input_tokens == answer_plain["usage"]["prompt_tokens"]
    assert plain.id and plain.id != fields.id

    # rank_fields: several fields are ranked as "field: value" lines; the document comes back as it was sent.
    assert sent_fields["documents"] == [f"title: {d['title']}\ntext: {d['text']}" for d in OBJECTS]
    assert [(r.index, r.relevance_score, r.document.dict() if r.document else None) for r in fields.results] == [
        (i, score, OBJECTS[i]) for i, score in _ranked(answer_fields)]
    # A string and {"text"} are ranked on the same text; top_n past the documents returns them all.
    assert sent_strings["documents"] == [TEXTS[2], TEXTS[1]]
    assert [(r.index, r.document.text if r.document else None) for r in strings.results] == [
        (i, [TEXTS[2], TEXTS[1]][i]) for i, _ in _ranked(answer_strings)]

    _sdk_error(chunks.value, 422, "unsupported_max_chunks_per_doc",
               "max_chunks_per_doc is 10, but ragserve scores one chunk per document (its head, cut to the "
               "reranker's window): send 1 or leave it out", "max_chunks_per_doc")
    _sdk_error(missing.value, 422, "invalid_rank_field",
               "documents[1].title is missing: every rank field must hold text in every document",
               "documents[1].title")
    assert wrong_key.value.status_code == 401 and wrong_key.value.body["error"]["code"] == "invalid_api_key"


async def _cut(runner: httpx.AsyncClient, text: str, tokens: int) -> str:
    """``text``'s first ``tokens`` tokens, by the runner's own tokenizer."""
    ids = (await runner.post("/tokenize", json={"model": MODEL, "prompt": text, "add_special_tokens": False})).json()
    assert len(ids["tokens"]) > tokens
    prefix = (await runner.post("/detokenize", json={"model": MODEL, "tokens": ids["tokens"][:tokens]})).json()
    assert text.startswith(prefix["prompt"])
    return str(prefix["prompt"])


async def test_the_v2_client(qwen3_settings: Settings, runners: RunnerURLs) -> None:
    recorder = RecordingTransport()
    with live_server(qwen3_settings, transports={"rerank": recorder}) as url, httpx.Client(timeout=120) as http:
        co = cohere.ClientV2(api_key=API_KEY, base_url=url, max_retries=0, httpx_client=http)
        short = co.rerank(model=MODEL, query=QUERY, documents=TEXTS, top_n=1)
        capped = co.rerank(model="rerank-v3.5", query=QUERY, documents=[TEXTS[1], LONG], max_tokens_per_doc=16,
                           priority=3, relevant_spans=cohere.RerankRelevantSpans(mode="disabled"))
        with pytest.raises(cohere.UnprocessableEntityError) as spans:
            co.rerank(model=MODEL, query=QUERY, documents=TEXTS,
                      relevant_spans=cohere.RerankRelevantSpans(mode="enabled"))
        with pytest.raises(cohere.UnprocessableEntityError) as zero:
            co.rerank(model=MODEL, query=QUERY, documents=TEXTS, top_n=0)
        async with httpx.AsyncClient(base_url=runners.qwen3_rerank, timeout=60) as runner:
            head = await _cut(runner, LONG, 16)
        alone = co.rerank(model=MODEL, query=QUERY, documents=[head])
    (sent_short, answer_short), (sent_capped, answer_capped), (sent_alone, _) = recorder.exchanges
    # Short documents: no cut asked (Cohere's default max_tokens_per_doc, 4096, is past every one of them).
    assert sent_short == {"model": MODEL, "query": QUERY, "documents": TEXTS, "top_n": 3,
                          "chat_template_kwargs": INSTRUCTION}
    assert [(r.index, r.relevance_score) for r in short.results] == _ranked(answer_short)[:1]
    assert short.meta is not None and short.meta.api_version is not None and short.meta.api_version.version == "2"
    assert sent_capped == {"model": MODEL, "query": QUERY, "documents": [TEXTS[1], LONG], "top_n": 2,
                           "chat_template_kwargs": INSTRUCTION, "max_tokens_per_doc": 16}
    assert [(r.index, r.relevance_score) for r in capped.results] == _ranked(answer_capped)
    # The long document was scored as its first 16 tokens: the same score as those tokens sent alone.
    assert sent_alone["documents"] == [head] and "max_tokens_per_doc" not in sent_alone
    long_score = dict(_ranked(answer_capped))[1]
    assert alone.results[0].relevance_score == pytest.approx(long_score, abs=1e-6)

    _sdk_error(spans.value, 422, "unsupported_relevant_spans",
               "relevant_spans: ragserve's reranker scores whole documents and finds no spans; send mode "
               '"disabled" or leave it out', "relevant_spans.mode")
    _sdk_error(zero.value, 422, "validation_error", "top_n: Input should be greater than or equal to 1", "top_n")


def test_without_a_reranker_the_sdk_user_reads_why(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url, httpx.Client(timeout=120) as http:
        with pytest.raises(cohere.BadRequestError) as v2:
            cohere.ClientV2(api_key=API_KEY, base_url=url, max_retries=0, httpx_client=http).rerank(
                model="rerank-v3.5", query=QUERY, documents=TEXTS)
        with pytest.raises(cohere.BadRequestError) as v1:
            cohere.Client(api_key=API_KEY, base_url=url, max_retries=0, httpx_client=http).rerank(
                query=QUERY, documents=TEXTS)
    for exc in (v1.value, v2.value):
        _sdk_error(exc, 400, "reranker_not_configured", "this deployment's profile has no reranker", None)


V1 = {"query": QUERY, "documents": TEXTS}
V2 = {"query": QUERY, "documents": TEXTS, "model": MODEL}
REFUSALS: list[tuple[str, dict[str, Any], int, str, str | None]] = [
    ("/v1/rerank", {**V1, "documents": []}, 422, "validation_error", "documents"),
    ("/v1/rerank", {**V1, "documents": [{"text": 1}]}, 422, "validation_error", "documents.0.text"),
    ("/v1/rerank", {**V1, "documents": [""]}, 422, "validation_error", "documents.0"),
    ("/v1/rerank", {**V1, "query": ""}, 422, "validation_error", "query"),
    ("/v1/rerank", {**V1, "rank_fields": []}, 422, "validation_error", "rank_fields"),
    ("/v1/rerank", {**V1, "rank_fields": ["title"]}, 422, "invalid_rank_field", "documents[0].title"),
    ("/v1/rerank", {**V1, "documents": [{"text": ""}]}, 422, "invalid_rank_field", "documents[0].text"),
    ("/v1/rerank", {**V1, "max_chunks_per_doc": 10}, 422, "unsupported_max_chunks_per_doc", "max_chunks_per_doc"),
    ("/v1/rerank", {**V1, "max_chunks_per_doc": 0}, 422, "validation_error", "max_chunks_per_doc"),
    ("/v1/rerank", {**V1, "return_documents": "yes"}, 422, "validation_error", "return_documents"),
    ("/v1/rerank", {**V1, "top_n": 0}, 422, "validation_error", "top_n"),
    ("/v1/rerank", {**V1, "max_tokens_per_doc": 5}, 422, "validation_error", "max_tokens_per_doc"),
    ("/v1/rerank", {**V1, "documents": ["d"] * 201}, 413, "too_many_documents", "documents"),
    ("/v2/rerank", {**V2, "documents": [{"text": "a"}]}, 422, "document_not_text", "documents"),
    ("/v2/rerank", {**V2, "documents": [1]}, 422, "validation_error", "documents.0"),
    ("/v2/rerank", {**V2, "max_tokens_per_doc": 0}, 422, "validation_error", "max_tokens_per_doc"),
    ("/v2/rerank", {**V2, "relevant_spans": {"mode": "enabled"}}, 422, "unsupported_relevant_spans",
     "relevant_spans.mode"),
    ("/v2/rerank", {**V2, "relevant_spans": {"mode": "sometimes"}}, 422, "validation_error", "relevant_spans.mode"),
    ("/v2/rerank", {**V2, "priority": -1}, 422, "validation_error", "priority"),
    ("/v2/rerank", {**V2, "rank_fields": ["text"]}, 422, "validation_error", "rank_fields"),
    ("/v2/rerank", {**V2, "return_documents": True}, 422, "validation_error", "return_documents"),
    ("/v2/rerank", {**V2, "documents": ["d"] * 201}, 413, "too_many_documents", "documents"),
]


async def test_each_refused_field_is_named_and_nothing_reaches_the_runner(qwen3_settings: Settings) -> None:
    recorder = RecordingTransport()
    async with app_client(qwen3_settings, transports={"rerank": recorder}) as client:
        answers = [await client.post(path, json=body) for path, body, *_ in REFUSALS]
    got = [(r.status_code, r.json()["error"]["code"], r.json()["error"].get("param")) for r in answers]
    assert got == [(status, code, param) for _, _, status, code, param in REFUSALS]
    for r in answers:
        assert "functools" not in r.text and " at 0x" not in r.text and "function-after" not in r.text, r.text
    assert recorder.exchanges == []


async def test_ragserves_instruction_reaches_the_template_on_both_versions(qwen3_settings: Settings) -> None:
    recorder = RecordingTransport()
    async with app_client(qwen3_settings, transports={"rerank": recorder}) as client:
        v1 = await client.post("/v1/rerank", json={**V1, "instruction": "Find recipes"})
        v2 = await client.post("/v2/rerank", json={**V2, "instruction": "Find recipes"})
    assert v1.status_code == 200 and v2.status_code == 200, (v1.text, v2.text)
    assert [sent["chat_template_kwargs"] for sent, _ in recorder.exchanges] == [{"instruction": "Find recipes"}] * 2
    for r, (_, answer) in zip((v1, v2), recorder.exchanges, strict=True):
        assert r.json()["results"] == [{"index": i, "relevance_score": s} for i, s in _ranked(answer)]
        assert r.json()["meta"]["tokens"] == {"input_tokens": answer["usage"]["prompt_tokens"]}
        assert r.json()["id"] == r.headers["x-request-id"]
