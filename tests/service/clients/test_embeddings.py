"""The embedding client asks for base64 float32 and decodes the runner's exact bytes."""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest

from service.clients.embeddings import EmbeddingClient
from service.clients.errors import UpstreamError
from service.clients.runner import RunnerClient
from service.profiles import MINILM


def client(handler) -> EmbeddingClient:  # type: ignore[no-untyped-def]
    runner = RunnerClient("embedding", "http://runner", timeout_s=5, transport=httpx.MockTransport(handler))
    return EmbeddingClient(runner, MINILM.embedding)


async def test_vectors_are_the_runners_float32_bytes() -> None:
    vectors = np.random.default_rng(0).normal(size=(3, 384)).astype("<f4")
    sent: list[dict] = []  # type: ignore[type-arg]

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        data = [{"index": i, "embedding": base64.b64encode(v.tobytes()).decode()} for i, v in enumerate(vectors)]
        return httpx.Response(200, json={"data": data[::-1]})  # out of order: the client sorts by index

    got = await client(handler).embed_batch(["a", "b", "c"])
    assert sent[0]["encoding_format"] == "base64" and sent[0]["input"] == ["a", "b", "c"]
    assert np.array(got, dtype="<f4").tobytes() == vectors.tobytes()


async def test_a_malformed_vector_is_an_upstream_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"index": 0, "embedding": "not base64!"}]})

    with pytest.raises(UpstreamError, match="unexpected shape"):
        await client(handler).embed_batch(["a"])
