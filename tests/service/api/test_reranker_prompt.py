"""The prompt the reranker runner receives is the Qwen3-Reranker format from the model card.

Checked from outside our code: the model card's prompt is written out here by hand and counted by the
runner's own ``/tokenize``; the runner's ``/rerank`` answer reports how many prompt tokens it scored for
the request ragserve sent during a real ``/v1/search``.
"""

from __future__ import annotations

import httpx
import pytest

from service.config import Settings
from service.profiles import QWEN3
from tests.support.app import app_client
from tests.support.recording import RecordingTransport
from tests.support.runners import RunnerURLs

MODEL_CARD_PROMPT = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    'provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
    "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


async def _count(url: str, prompt: str) -> int:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{url}/tokenize", json={"model": QWEN3.reranker.name, "prompt": prompt,
                                                    "add_special_tokens": False})
    r.raise_for_status()
    return int(r.json()["count"])


@pytest.mark.parametrize("instruction", [None, "Find passages about foxes, and nothing else at all"])
async def test_rerank_prompt_matches_model_card(
    runners: RunnerURLs, qwen3_settings: Settings, instruction: str | None
) -> None:
    query, doc = "what does the fox do", "The quick brown fox jumps over the lazy dog"
    recorder = RecordingTransport()
    async with app_client(qwen3_settings, transports={"rerank": recorder}) as client:
        await client.post("/v1/collections", json={"name": "one"})
        await client.post("/v1/collections/one/documents", json={"documents": [{"id": "d", "text": doc}]})
        rerank = {"enabled": True} if instruction is None else {"enabled": True, "instruction": instruction}
        r = await client.post("/v1/search", json={"collection": "one", "query": query, "rerank": rerank})
    assert r.status_code == 200, r.text
    (sent, answer), = recorder.exchanges
    scored = answer["usage"]["prompt_tokens"]
    prompt = MODEL_CARD_PROMPT.format(instruction=instruction or DEFAULT_INSTRUCTION, query=query, doc=doc)
    assert scored == await _count(runners.qwen3_rerank, prompt)
    # The check can fail: a single missing trailing newline changes the count.
    assert await _count(runners.qwen3_rerank, prompt[:-1]) != scored
    # The query is sent raw: the embedding instruction must not leak into the reranker.
    assert sent["query"] == query and sent["documents"] == [doc]
