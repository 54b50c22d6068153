"""The prompt the reranker runner scores is the Qwen3-Reranker prompt of the model card, token id by token id.

Checked from outside ragserve's code, on the real tiny-Qwen3 reranker runner, for the ``/rerank`` request
ragserve sent during a real ``/v1/search`` (recorded at the transport, which still talks to the runner):

- *the ids that request produces at the runner*: vLLM's score path renders the template the runner was
  started with (``--chat-template``) over the messages ``[{"role": "query"}, {"role": "document"}]`` with the
  request's ``chat_template_kwargs``, then tokenizes the text with ``add_special_tokens=True``
  (``get_score_prompt`` in vllm/entrypoints/pooling/scoring/io_processor.py). The runner's own ``/tokenize``
  does the same for those messages, so it is asked for exactly what ragserve sent;
- *the model card's ids*: the model card's prompt is written out here by hand, filled in with the query,
  the document and the instruction this test expects, and tokenized by the same runner;
- the two lists must be equal, and the relevance score the runner answered ragserve must be the score the
  runner gives the model card's ids on their own (``/classify`` over the token ids: the same head, the same
  activation), so the ids vLLM actually scored are those ids, not only the ids ``/tokenize`` says it would build.

The comparison can fail: the query and the document swapped, or another instruction, give other ids and
another score (asserted below too, so a runner whose answers ignored the text would be noticed).
"""

from __future__ import annotations

from typing import Any

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
MODEL = QWEN3.reranker.name


async def _tokenize(runner: httpx.AsyncClient, body: dict[str, Any]) -> list[int]:
    r = await runner.post("/tokenize", json={"model": MODEL, "add_special_tokens": True, **body})
    r.raise_for_status()
    return [int(t) for t in r.json()["tokens"]]


async def _card_ids(runner: httpx.AsyncClient, *, instruction: str, query: str, doc: str) -> list[int]:
    return await _tokenize(runner, {"prompt": MODEL_CARD_PROMPT.format(instruction=instruction, query=query, doc=doc)})


async def _request_ids(runner: httpx.AsyncClient, sent: dict[str, Any], document: str) -> list[int]:
    """The ids the runner builds from a ``/rerank`` request body for one of its documents."""
    return await _tokenize(runner, {
        "messages": [{"role": "query", "content": sent["query"]}, {"role": "document", "content": document}],
        "chat_template_kwargs": sent.get("chat_template_kwargs") or {},
    })


async def _score(runner: httpx.AsyncClient, ids: list[int]) -> float:
    r = await runner.post("/classify", json={"model": MODEL, "input": [ids]})
    r.raise_for_status()
    return float(r.json()["data"][0]["probs"][0])


@pytest.mark.parametrize("instruction", [None, "Find passages about foxes, and nothing else at all"])
async def test_rerank_prompt_is_the_model_card_prompt_id_for_id(
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
    # The query is sent raw (the embedding instruction must not leak into the reranker), the chunk as it is.
    assert sent["query"] == query and sent["documents"] == [doc]
    expected_instruction = instruction or DEFAULT_INSTRUCTION

    async with httpx.AsyncClient(base_url=runners.qwen3_rerank, timeout=60) as runner:
        card = await _card_ids(runner, instruction=expected_instruction, query=query, doc=doc)
        produced = await _request_ids(runner, sent, sent["documents"][0])
        assert produced == card, "the runner's prompt for ragserve's request is not the model card's"
        # Nothing cut: a short document is sent as it is, with no cut asked (long ones: test_rerank_long_documents)
        assert answer["usage"]["prompt_tokens"] == len(card) and "max_tokens_per_doc" not in sent
        assert "truncate_prompt_tokens" not in sent  # it would cut the prompt's end, the closing turn
        (result,) = answer["results"]
        card_score = await _score(runner, card)
        assert result["relevance_score"] == pytest.approx(card_score, abs=1e-6), "vLLM scored other ids"

        # The same comparison for a request that swapped query and document, or carried another instruction:
        swapped = await _request_ids(runner, {**sent, "query": doc}, query)
        other = await _request_ids(runner, {**sent, "chat_template_kwargs": {"instruction": expected_instruction
                                                                              .replace("passages", "documents")}},
                                   doc)
        assert swapped != card and other != card
        assert len(await _card_ids(runner, instruction=expected_instruction, query=doc, doc=query)) == len(card)
        for wrong in (swapped, other, card[:-1]):
            assert abs(await _score(runner, wrong) - card_score) > 1e-4
