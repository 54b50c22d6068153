"""The official ``openai`` client, unmodified, pointed at the live ragserve (``base_url=.../v1``, a ragserve
key): embeddings, chat whole and streamed, the grounded extension through ``extra_body``, and the example
script in docs/examples run as a user runs it; the model list and ``models.retrieve`` on a profile without a
generator, and the refusals an embeddings user reads (token ids, no input, an input past the window)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from service.client import Client
from service.config import Settings
from service.profiles import MINILM
from tests.service.client.seed import seed
from tests.support.app import API_KEY
from tests.support.server import live_server

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "openai_sdk.py"


def test_embeddings_and_chat_through_the_openai_client(vl_settings: Settings) -> None:
    with live_server(vl_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        sdk = OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0, timeout=300)
        wrong = OpenAI(base_url=f"{url}/v1", api_key="wrong-key-0123456789", max_retries=0)
        embedded = sdk.embeddings.create(model="anything", input=["espresso", "tea"])
        ours = rs.embed(["espresso", "tea"])
        model = sdk.models.list().data[0].id
        ask = {"model": model, "messages": [{"role": "user", "content": "How is espresso made?"}], "max_tokens": 16,
               "temperature": 0, "extra_body": {"ragserve": {"collections": ["kb"], "top_k": 2, "rerank": False}}}
        whole = sdk.chat.completions.create(**ask)  # type: ignore[call-overload]
        chunks = list(sdk.chat.completions.create(stream=True, **ask))  # type: ignore[call-overload]
        with pytest.raises(openai.AuthenticationError) as bad_key:
            wrong.models.list()
        with pytest.raises(openai.NotFoundError) as bad_model:
            sdk.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
        sdk.close()
        wrong.close()
        env = {**os.environ, "RAGSERVE_URL": url, "RAGSERVE_API_KEY": API_KEY}
        example = subprocess.run([sys.executable, str(EXAMPLE), "kb", "How is espresso made?"], env=env, text=True,
                                 capture_output=True, timeout=300)
    assert [d.index for d in embedded.data] == [0, 1]
    assert [d.embedding for d in embedded.data] == [pytest.approx(v, rel=1e-6) for v in ours.vectors]
    assert model == "Qwen/Qwen3-VL-2B-Instruct"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and text == whole.choices[0].message.content  # greedy: the stream says what the whole answer says
    final = chunks[-1]
    assert final.choices == []  # the citations chunk
    streamed, answered = final.model_extra["ragserve"], whole.model_extra["ragserve"]  # type: ignore[index]
    assert streamed["citations"] == answered["citations"]
    assert [c["number"] for c in answered["citations"]] == [1, 2]
    assert {**streamed["retrieval"], "timings_ms": None} == {**answered["retrieval"], "timings_ms": None}
    assert bad_key.value.status_code == 401 and bad_key.value.code == "invalid_api_key"
    assert bad_model.value.status_code == 404
    assert example.returncode == 0, example.stderr
    lines = example.stdout.splitlines()
    assert lines[0] == f"embedding: {len(ours.vectors[0])} dimensions"
    assert [line[:4] for line in lines[-3:]] == ["[1] ", "[2] ", "[3] "]  # top_k 3 of the 3 documents


MINILM_WINDOW = 256
LONG = "espresso crema " * 300


def test_models_and_embedding_refusals_without_a_generator(minilm_settings: Settings) -> None:
    name = MINILM.embedding.name
    with live_server(minilm_settings) as url, OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0,
                                                     timeout=120) as sdk:
        listed = sdk.models.list()
        one = sdk.models.retrieve(name)  # the SDK sends the "/" in the id as %2F
        with pytest.raises(openai.NotFoundError) as missing:
            sdk.models.retrieve("gpt-4o")
        with pytest.raises(openai.UnprocessableEntityError) as token_ids:
            sdk.embeddings.create(model=name, input=[[1, 2, 3]])
        with pytest.raises(openai.UnprocessableEntityError) as empty:
            sdk.embeddings.create(model=name, input=[])
        with pytest.raises(openai.UnprocessableEntityError) as too_long:
            sdk.embeddings.create(model=name, input=["short", LONG], extra_body={"truncate": "NONE"})
        cut = sdk.embeddings.create(model=name, input=["short", LONG])
    assert [(m.id, m.object, m.owned_by, m.created) for m in listed.data] == [(name, "model", "ragserve", one.created)]
    assert one.model_dump(exclude_unset=True) == listed.data[0].model_dump(exclude_unset=True) == {
        "id": name, "object": "model", "created": one.created, "owned_by": "ragserve", "task": "embed",
        "max_model_len": MINILM_WINDOW}
    assert (missing.value.code, missing.value.param) == ("model_not_found", "model_id")
    assert missing.value.message.endswith(f"model 'gpt-4o' is not served here; available: {name}")
    assert (token_ids.value.code, token_ids.value.param) == ("token_input", "input")
    assert "token ids are not taken" in token_ids.value.message
    assert (empty.value.code, empty.value.param) == ("empty_input", "input")
    assert (too_long.value.code, too_long.value.param) == ("input_too_long", "input[1]")
    assert f"over the embedding model's window of {MINILM_WINDOW} tokens (truncate: NONE)" in too_long.value.message
    assert [d.index for d in cut.data] == [0, 1] and cut.usage.prompt_tokens <= 2 * MINILM_WINDOW
