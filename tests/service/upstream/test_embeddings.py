"""The embedding client asks for base64 float32 and decodes the runner's exact bytes; the queries of one turn
of the event loop travel together."""

from __future__ import annotations

import asyncio
import base64
import gc
import json

import httpx
import numpy as np
import pytest

from service.profiles import MINILM
from service.upstream.embeddings import EmbeddingClient
from service.upstream.errors import UpstreamError, UpstreamRejected
from service.upstream.runner import RunnerClient


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


async def test_the_indexers_form_is_one_matrix_the_collector_never_walks() -> None:
    """A bulk batch (the 40 rows here stand for thousands) comes back as one float32 matrix, not a list of floats
    per vector: the garbage collector walks a list float by float, and thousands of them in flight made full
    collections hold the GIL for about 50 ms each (the soak's event-loop stall)."""
    vectors = np.random.default_rng(1).normal(size=(40, 384)).astype("<f4")

    def handler(request: httpx.Request) -> httpx.Response:
        data = [{"index": i, "embedding": base64.b64encode(v.tobytes()).decode()} for i, v in enumerate(vectors)]
        return httpx.Response(200, json={"data": data[::-1]})

    got = await client(handler).embed_matrix([f"t{i}" for i in range(40)])
    assert got.dtype == np.dtype("<f4") and got.shape == (40, 384)
    assert got.tobytes() == vectors.tobytes()
    assert not gc.is_tracked(got)


async def test_a_vector_of_the_wrong_width_is_an_upstream_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        data = [{"index": i, "embedding": base64.b64encode(np.zeros(n, "<f4").tobytes()).decode()}
                for i, n in enumerate((384, 383))]
        return httpx.Response(200, json={"data": data})

    with pytest.raises(UpstreamError, match="expected 2 vectors of 384 dims, got 2, of 383 dims"):
        await client(handler).embed_matrix(["a", "b"])


async def test_a_malformed_vector_is_an_upstream_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"index": 0, "embedding": "not base64!"}]})

    with pytest.raises(UpstreamError, match="unexpected shape"):
        await client(handler).embed_batch(["a"])


def _vector(text: str, dims: int) -> np.ndarray:
    """A vector that says which input it answers (its seed is the text)."""
    return np.random.default_rng(list(text.encode())).normal(size=dims).astype("<f4")


def _answering(sent: list[dict]):  # type: ignore[no-untyped-def,type-arg]
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append(body)
        dims = body.get("dimensions", 384)
        data = [{"index": i, "embedding": base64.b64encode(_vector(t, dims).tobytes()).decode()}
                for i, t in enumerate(body["input"])]
        return httpx.Response(200, json={"data": data})
    return handler


def _bytes(vector: list[float]) -> bytes:
    return np.array(vector, dtype="<f4").tobytes()


async def test_the_queries_of_one_turn_travel_in_one_request_each_answered_its_own_vector() -> None:
    sent: list[dict] = []  # type: ignore[type-arg]
    embedder = client(_answering(sent))
    texts = [f"query {i}" for i in range(5)]
    got = await asyncio.gather(*(embedder.embed_query(t) for t in texts))
    assert [body["input"] for body in sent] == [texts]  # MiniLM: a query is sent as it is
    assert [_bytes(v) for v in got] == [_vector(t, 384).tobytes() for t in texts]
    alone = await embedder.embed_query("alone")  # one query: a request of its own, as it came
    assert sent[-1]["input"] == ["alone"] and _bytes(alone) == _vector("alone", 384).tobytes()


async def test_each_output_size_and_each_batch_size_is_a_request_of_its_own() -> None:
    sent: list[dict] = []  # type: ignore[type-arg]
    runner = RunnerClient("embedding", "http://runner", timeout_s=5, transport=httpx.MockTransport(_answering(sent)))
    embedder = EmbeddingClient(runner, MINILM.embedding, batch_size=2)
    calls = [("a", None), ("b", 128), ("c", None), ("d", None), ("e", 128)]
    got = await asyncio.gather(*(embedder.embed_query(t, dimensions=d) for t, d in calls))
    assert sorted((b["input"], b.get("dimensions")) for b in sent) == [
        (["a", "c"], None), (["b", "e"], 128), (["d"], None)]
    assert [_bytes(v) for v in got] == [_vector(t, d or 384).tobytes() for t, d in calls]


async def test_while_a_bulk_request_is_out_each_query_of_a_turn_is_a_request_of_its_own() -> None:
    """Behind bulk work a shared query request answers when its slowest input is done (each input is its own
    request in vLLM's engine): while a bulk request is at the runner, or waiting for a slot, each query goes
    alone; once it is answered, a turn's queries share a request again."""
    sent: list[list[str]] = []
    answer = _answering([])
    bulk_arrived, release_bulk = asyncio.Event(), asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        inputs = json.loads(request.content)["input"]
        sent.append(inputs)
        if inputs == ["fail"]:
            return httpx.Response(500, json={"message": "broken"})
        if inputs == ["doc 1", "doc 2"]:
            bulk_arrived.set()
            await release_bulk.wait()
        return answer(request)

    embedder = client(handler)
    bulk = asyncio.create_task(embedder.embed_batch(["doc 1", "doc 2"]))
    await bulk_arrived.wait()
    texts = ["q1", "q2", "q3"]
    during = await asyncio.gather(*(embedder.embed_query(t) for t in texts))
    assert sent[0] == ["doc 1", "doc 2"] and sorted(sent[1:]) == [["q1"], ["q2"], ["q3"]]
    assert [_bytes(v) for v in during] == [_vector(t, 384).tobytes() for t in texts]
    release_bulk.set()
    assert [_bytes(v) for v in await bulk] == [_vector(t, 384).tobytes() for t in ("doc 1", "doc 2")]
    after = await asyncio.gather(*(embedder.embed_query(t) for t in texts))
    assert sent[4:] == [texts]
    assert [_bytes(v) for v in after] == [_vector(t, 384).tobytes() for t in texts]

    with pytest.raises(UpstreamError):  # a bulk request that fails (after its retries) is over too
        await embedder.embed_batch(["fail"])
    await asyncio.gather(*(embedder.embed_query(t) for t in texts))
    assert sent[-1] == texts and set(map(tuple, sent[5:-1])) == {("fail",)}


async def test_a_query_the_runner_refuses_fails_alone() -> None:
    """The runner refuses a request for one of its inputs: each query is sent again alone, and only the one
    refused on its own fails (422, the runner's reason)."""
    sent: list[list[str]] = []
    answer = _answering([])

    def handler(request: httpx.Request) -> httpx.Response:
        inputs = json.loads(request.content)["input"]
        sent.append(inputs)
        if "bad" in inputs:
            return httpx.Response(400, json={"message": "bad input"})
        return answer(request)

    embedder = client(handler)
    got = await asyncio.gather(*(embedder.embed_query(t) for t in ("one", "bad", "two")), return_exceptions=True)
    assert sent[0] == ["one", "bad", "two"] and sorted(sent[1:]) == [["bad"], ["one"], ["two"]]
    assert _bytes(got[0]) == _vector("one", 384).tobytes() and _bytes(got[2]) == _vector("two", 384).tobytes()
    assert isinstance(got[1], UpstreamRejected)
    assert str(got[1]) == "embedding runner: runner refused the input (400): bad input"


async def test_a_cancelled_query_leaves_the_others_answered_and_all_cancelled_cancel_the_request() -> None:
    arrived, release, cancelled = asyncio.Event(), asyncio.Event(), asyncio.Event()
    outcomes: list[str] = []
    answer = _answering([])

    async def handler(request: httpx.Request) -> httpx.Response:
        arrived.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            outcomes.append("cancelled")
            cancelled.set()
            raise
        outcomes.append("answered")
        return answer(request)

    embedder = client(handler)
    calls = [asyncio.create_task(embedder.embed_query(t)) for t in ("x", "y")]
    await arrived.wait()
    calls[0].cancel()
    release.set()
    assert _bytes(await calls[1]) == _vector("y", 384).tobytes()
    assert calls[0].cancelled() and outcomes == ["answered"]

    arrived.clear()
    release.clear()
    calls = [asyncio.create_task(embedder.embed_query(t)) for t in ("x", "y")]
    await arrived.wait()
    for call in calls:
        call.cancel()
    await asyncio.gather(*calls, return_exceptions=True)
    await asyncio.wait_for(cancelled.wait(), 60)  # the request's task hears of it on its next turn
    assert outcomes == ["answered", "cancelled"]


def test_a_query_left_by_an_ended_loop_does_not_hold_up_the_next_loops() -> None:
    """A loop that ends in the turn a query was asked for never sends it; a query on the next loop is still
    sent (the client's pending turn belongs to the loop that made it)."""
    sent: list[dict] = []  # type: ignore[type-arg]
    embedder = client(_answering(sent))

    async def ask_and_end() -> None:
        asyncio.ensure_future(embedder.embed_query("left"))  # noqa: RUF006 - left behind on purpose

    loop = asyncio.new_event_loop()
    loop.run_until_complete(ask_and_end())
    loop.close()
    vector = asyncio.run(asyncio.wait_for(embedder.embed_query("next"), 60))
    assert [body["input"] for body in sent] == [["next"]]
    assert _bytes(vector) == _vector("next", 384).tobytes()
