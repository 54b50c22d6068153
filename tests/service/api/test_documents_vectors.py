"""Precomputed vectors arrive as JSON lists or as base64 float32 (``vector_base64``, what ``/v1/embeddings``
returns with ``encoding_format: base64``): the same bytes are stored either way, and a broken one is refused
with nothing stored changed. Real MiniLM runner, embedded Qdrant Edge store."""

from __future__ import annotations

import base64

import numpy as np

from service.config import Settings
from tests.support.app import app_client

TEXT = "the router resets after holding its button for ten seconds"


async def test_base64_and_list_vectors_store_the_same_bytes(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        r = await client.post("/v1/embeddings", json={"input": [TEXT], "encoding_format": "base64"})
        b64 = r.json()["data"][0]["embedding"]
        vector = np.frombuffer(base64.b64decode(b64), dtype="<f4")
        as_list = [float(x) for x in vector]  # float32 values, exactly representable as JSON doubles
        r = await client.post("/v1/collections/kb/documents", json={"documents": [
            {"id": "listed", "text": "a", "vector": as_list},
            {"id": "encoded", "text": "b", "vector_base64": b64},
            {"id": "embedded", "text": TEXT},
        ]})
        assert r.status_code == 200, r.text
        assert r.json()["embedded"] == 1
        search = {"collection": "kb", "query": TEXT, "mode": "dense", "top_k": 3, "rerank": {"enabled": False}}
        before = (await client.post("/v1/search", json=search)).json()["hits"]

        def bad(**vectors: object) -> dict[str, object]:
            return {"documents": [{"id": "listed", "text": "overwritten?", **vectors}]}

        nan = base64.b64encode(np.array([np.nan] + [0.5] * 383, dtype="<f4").tobytes()).decode()
        zero = base64.b64encode(np.zeros(384, dtype="<f4").tobytes()).decode()
        short = base64.b64encode(vector[:383].tobytes()).decode()
        refusals = {
            "not base64": (bad(vector_base64="abc$"), 422, "validation_error"),
            "torn float": (bad(vector_base64=base64.b64encode(b"\x00\x00\x80?\x01").decode()), 422, "invalid_vector"),
            "both fields": (bad(vector=as_list, vector_base64=b64), 422, "invalid_vector"),
            "a NaN": (bad(vector_base64=nan), 422, "invalid_vector"),
            "all zeros": (bad(vector_base64=zero), 422, "zero_vector"),
            "383 dimensions": (bad(vector_base64=short), 422, "vector_dimension_mismatch"),
        }
        answers = {}
        for name, (body, _, _) in refusals.items():
            r = await client.post("/v1/collections/kb/documents", json=body)
            answers[name] = (r.status_code, r.json()["error"]["code"])
        after = (await client.post("/v1/search", json=search)).json()["hits"]
        points = (await client.get("/v1/collections/kb")).json()["points"]

    scores = {h["doc_id"]: h["vector_score"] for h in before}
    assert set(scores) == {"listed", "encoded", "embedded"}
    assert scores["listed"] == scores["encoded"] == scores["embedded"]  # one vector, bit for bit
    assert answers == {name: (status, code) for name, (_, status, code) in refusals.items()}
    assert after == before and points == 3
