"""A document longer than the reranker's window is cut, the document and not the prompt (issue 12).

On the real tiny-Qwen3 reranker runner (window ``max_model_len`` 2048), checked from outside ragserve's code:
the ids vLLM scored for ragserve's request are the Qwen3-Reranker template over the query and the document's
first ``max_tokens_per_doc`` tokens (found with the runner's own ``/tokenize`` and ``/detokenize``), they fit
the window and end with the template's closing turn, and the score the runner gave ragserve is the score of
exactly those ids (``/classify``). The former way, ``truncate_prompt_tokens`` on the whole prompt, is asked
of the runner directly beside it: its prompt loses the closing turn and scores differently, which is the bug.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from service.config import Settings
from service.profiles import QWEN3
from service.upstream.factory import rerank_client
from tests.support.app import app_client
from tests.support.recording import RecordingTransport
from tests.support.runners import RunnerURLs

MODEL = QWEN3.reranker.name
CLOSING_TURN = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
QUERY = "what do the genes of foxes encode"
# ASCII words, so the runner's token prefix detokenizes to a prefix of the text (no byte-split characters).
LONG = " ".join(f"gene{i % 97} protein binding fox{i % 13} cell" for i in range(700))
SHORT = "The quick brown fox jumps over the lazy dog"


async def _post(runner: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Any:
    r = await runner.post(path, json={"model": MODEL, **body})
    r.raise_for_status()
    return r.json()


async def _prompt_ids(runner: httpx.AsyncClient, sent: dict[str, Any], document: str) -> list[int]:
    """The ids the runner builds for one document of a ``/rerank`` body (the score path's own rendering)."""
    answer = await _post(runner, "/tokenize", {
        "add_special_tokens": True, "chat_template_kwargs": sent.get("chat_template_kwargs") or {},
        "messages": [{"role": "query", "content": sent["query"]}, {"role": "document", "content": document}]})
    return [int(t) for t in answer["tokens"]]


async def _score(runner: httpx.AsyncClient, ids: list[int]) -> float:
    return float((await _post(runner, "/classify", {"input": [ids]}))["data"][0]["probs"][0])


async def _cut(runner: httpx.AsyncClient, text: str, tokens: int) -> str:
    ids = (await _post(runner, "/tokenize", {"prompt": text, "add_special_tokens": False}))["tokens"]
    assert len(ids) > tokens, "the test document must be longer than the cut"
    prefix = (await _post(runner, "/detokenize", {"tokens": ids[:tokens]}))["prompt"]
    assert text.startswith(prefix)
    return str(prefix)


async def test_long_document_is_cut_not_the_prompt(runners: RunnerURLs, qwen3_settings: Settings) -> None:
    recorder = RecordingTransport()
    client = rerank_client(qwen3_settings, QWEN3, transports={"rerank": recorder})
    assert client is not None and client.window == runners.max_model_len
    async with httpx.AsyncClient(base_url=runners.qwen3_rerank, timeout=60) as runner:
        closing = (await _post(runner, "/tokenize", {"prompt": CLOSING_TURN, "add_special_tokens": False}))["tokens"]
        try:
            (result,) = await client.rerank(QUERY, [LONG])
        finally:
            await client.runner.aclose()
        (tokenize, _), (sent, answer) = recorder.exchanges  # one /tokenize for the prompt's cost, then /rerank
        assert tokenize["messages"][1] == {"role": "document", "content": ""}
        assert "truncate_prompt_tokens" not in sent and sent["documents"] == [LONG]
        budget = sent["max_tokens_per_doc"]
        expected = await _prompt_ids(runner, sent, await _cut(runner, LONG, budget))
        assert answer["usage"]["prompt_tokens"] == len(expected) <= runners.max_model_len
        assert len(expected) >= runners.max_model_len - 16  # the window is used, not wasted
        assert expected[-len(closing):] == closing, "the template's closing turn was cut"
        score = await _score(runner, expected)
        assert result.score == pytest.approx(score, abs=1e-6), "vLLM scored other ids than the cut document's"

        # Beside it, the former request: the whole prompt cut to the window loses the closing turn.
        old = await _post(runner, "/rerank", {"query": QUERY, "documents": [LONG], "truncate_prompt_tokens":
                                              runners.max_model_len, "chat_template_kwargs": sent["chat_template_kwargs"]})
        assert old["usage"]["prompt_tokens"] == runners.max_model_len
        full = await _prompt_ids(runner, sent, LONG)
        assert full[runners.max_model_len - len(closing):runners.max_model_len] != closing
        assert abs(old["results"][0]["relevance_score"] - score) > 1e-4


async def test_v1_rerank_takes_long_documents(qwen3_settings: Settings) -> None:
    """``/v1/rerank`` answered 422 upstream_rejected_input for a document past the window; now it is cut,
    and a request of short documents costs no extra ``/tokenize`` call and carries no cut."""
    recorder = RecordingTransport()
    async with app_client(qwen3_settings, transports={"rerank": recorder}) as client:
        long = await client.post("/v1/rerank", json={"query": QUERY, "documents": [SHORT, LONG, {"text": LONG}]})
        short = await client.post("/v1/rerank", json={"query": QUERY, "documents": [SHORT], "instruction": "Foxes"})
    assert long.status_code == 200, long.text
    results = long.json()["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2]
    scores = {r["index"]: r["relevance_score"] for r in results}
    assert scores[1] == pytest.approx(scores[2], abs=1e-6)  # the same text, string or object: the same cut
    assert long.json()["meta"]["tokens"]["input_tokens"] <= 3 * qwen3_settings.runners.max_model_len
    assert short.status_code == 200, short.text
    paths = [("messages" in sent, "max_tokens_per_doc" in sent) for sent, _ in recorder.exchanges]
    assert paths == [(True, False), (False, True), (False, False)]


async def test_a_query_that_fills_the_window_is_cut_too(runners: RunnerURLs, qwen3_settings: Settings) -> None:
    recorder = RecordingTransport()
    client = rerank_client(qwen3_settings, QWEN3, transports={"rerank": recorder})
    assert client is not None
    try:
        results = await client.rerank(LONG[: len(LONG) // 2], [SHORT, LONG])
    finally:
        await client.runner.aclose()
    sent, answer = recorder.exchanges[-1]
    assert sent["query"] == LONG[: len(LONG) // 2] and sent["documents"] == [SHORT, LONG]
    assert sent["max_tokens_per_query"] == runners.max_model_len // 4
    answered = [(r["index"], r["relevance_score"]) for r in answer["results"]]
    assert [(r.index, r.score) for r in results] == sorted(answered, key=lambda pair: -pair[1])  # the runner's, ranked
    assert 0 < sent["max_tokens_per_doc"] and answer["usage"]["prompt_tokens"] <= 2 * runners.max_model_len
