"""/v1/embeddings: the embedding runner's OpenAI route behind ragserve's auth, text inputs only, and the choice
an over-length input gets (``truncate``: END cuts it to the window, NONE refuses it by name)."""

from __future__ import annotations

import math
from pathlib import Path

import httpx

from service.config import Settings
from tests.support.app import app_client
from tests.support.recording import RecordingTransport
from tests.support.scripted_embed import scripted_settings

WINDOW = 2048  # the tiny runners' --max-model-len (tests/conftest.py)
LONG = "espresso crema " * 1500


async def test_openai_embeddings(qwen3_settings: Settings) -> None:
    async with app_client(qwen3_settings) as client:
        r = await client.post("/v1/embeddings", json={"input": ["one text", "two texts"], "model": "anything"})
        small = await client.post("/v1/embeddings", json={"input": "one text", "dimensions": 32})
        bad = await client.post("/v1/embeddings", json={"input": "x", "dimensions": 4096})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == "Qwen/Qwen3-Embedding-0.6B"
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert all(len(d["embedding"]) == 1024 for d in body["data"])
    vec = small.json()["data"][0]["embedding"]
    assert len(vec) == 32 and math.isclose(math.hypot(*vec), 1.0, rel_tol=1e-4)  # Matryoshka, renormalised
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "unsupported_dimensions"


async def test_an_over_length_input_is_cut_or_refused_as_the_request_chooses(qwen3_settings: Settings) -> None:
    recorder = RecordingTransport()
    async with app_client(qwen3_settings, transports={"embedding": recorder}) as client:
        cut = await client.post("/v1/embeddings", json={"input": ["short", LONG]})
        refused = await client.post("/v1/embeddings", json={"input": ["short", LONG], "truncate": "NONE"})
        single = await client.post("/v1/embeddings", json={"input": LONG, "truncate": "NONE"})
        fits = await client.post("/v1/embeddings", json={"input": ["short"], "truncate": "NONE"})
        start = await client.post("/v1/embeddings", json={"input": "short", "truncate": "START"})
    (sent_cut, _), (count_1, counted_1), (count_2, counted_2), (sent_fits, _) = recorder.exchanges
    assert cut.status_code == 200 and len(cut.json()["data"]) == 2
    assert sent_cut == {"input": ["short", LONG], "encoding_format": "float", "truncate_prompt_tokens": WINDOW,
                        "model": "Qwen/Qwen3-Embedding-0.6B"}
    assert cut.json()["usage"]["prompt_tokens"] <= 2 * WINDOW  # cut to the window
    # NONE: only the input that may not fit is counted, by the runner's tokenizer; nothing is embedded.
    assert count_1 == count_2 == {"model": "Qwen/Qwen3-Embedding-0.6B", "prompt": LONG, "add_special_tokens": True}
    tokens = counted_1["count"]
    assert tokens == counted_2["count"] > WINDOW
    assert refused.status_code == 422 and refused.json()["error"] == {
        "type": "invalid_request", "code": "input_too_long", "param": "input[1]",
        "message": f"input[1] is {tokens} tokens long, over the embedding model's window of {WINDOW} tokens "
                   "(truncate: NONE); shorten it, or send truncate: END to have it cut to the window"}
    assert single.status_code == 422 and single.json()["error"]["param"] == "input"
    assert single.json()["error"]["message"].startswith(f"input is {tokens} tokens long")
    assert fits.status_code == 200 and sent_fits["input"] == ["short"] and "truncate" not in sent_fits
    assert start.status_code == 422 and start.json()["error"]["param"] == "truncate"


async def test_token_ids_and_empty_inputs_are_told_why(minilm_settings: Settings) -> None:
    recorder = RecordingTransport()
    bodies = [{"input": [1, 2, 3]}, {"input": [[1, 2], [3]]}, {"input": 7}, {"input": []}, {"input": [""]},
              {"input": ["a", 2]}]
    async with app_client(minilm_settings, transports={"embedding": recorder}) as client:
        answers = [await client.post("/v1/embeddings", json=body) for body in bodies]
    token_ids = ("input: token ids are not taken; ragserve embeds text only (its model's own tokenizer makes the "
                 "tokens): send the text or a list of texts")
    assert [(r.status_code, r.json()["error"]["code"], r.json()["error"]["message"]) for r in answers] == [
        (422, "token_input", token_ids), (422, "token_input", token_ids), (422, "token_input", token_ids),
        (422, "empty_input", "input: an empty list; send a text or a list of texts"),
        (422, "validation_error", "input.0: String should have at least 1 character"),
        (422, "validation_error", "input.1: Input should be a valid string"),
    ]
    for r in answers:
        assert "functools" not in r.text and " at 0x" not in r.text and "function-after" not in r.text, r.text
    assert recorder.exchanges == []


async def test_a_runner_answer_of_the_wrong_shape_is_a_502_that_says_so(tmp_path: Path) -> None:
    """The fault at the network edge: a runner that answers 200 with no vectors in its data."""

    def runner(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200)
        return httpx.Response(200, json={"object": "list", "data": [{"index": 0}], "model": "m", "usage": {}})

    async with app_client(scripted_settings(tmp_path), transports={"embedding": httpx.MockTransport(runner)}) as client:
        r = await client.post("/v1/embeddings", json={"input": "hello"})
    assert r.status_code == 502, r.text
    assert r.json()["error"] == {"type": "upstream_error", "code": "bad_upstream_response",
                                 "message": "embedding runner: its /v1/embeddings answer is not OpenAI's embeddings shape"}
