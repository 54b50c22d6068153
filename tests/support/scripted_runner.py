"""A scripted vLLM runner at the network edge (an ``httpx.MockTransport``), for claims about what ragserve does
with a runner's answers rather than about the runner itself.

It answers vLLM's shapes deterministically: ``/v1/embeddings`` (a unit vector seeded by the text, base64
float32 or JSON floats), ``/rerank`` (scores the test scripts, else seeded by the text), ``/tokenize``,
``/v1/chat/completions`` (whole, or streamed), ``/health``; and it keeps every request it was sent.

A streamed answer is a :class:`HeldStream`: event ``n + 1`` is written only after the test says it has seen
event ``n`` downstream (``observed(n)``). Anything between the runner and the test that buffered the stream (the
relay, the HTTP layer, the page) would then wait for an end that never comes: the test's liveness bound
(:data:`LIVENESS_S`) turns that deadlock into a failure naming the event that was held back, and no clock is
read to decide that events came "early enough".

The app under :func:`tests.support.server.live_server` runs in a thread with its own event loop, so the
barriers are :class:`Gate` objects, opened from the test's loop and awaited in the server's.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.config import Settings
from tests.support.app import API_KEY

LIVENESS_S = 60.0
"""How long a test waits for the next event before calling the stream held back: a bound on liveness only
(the event is released the moment the previous one was seen), far above any scheduling delay of a busy host."""

GENERATOR = "scripted-generator"
"""The served name of the scripted generator (set as ``generation.model`` by :func:`scripted_settings`)."""

RUNNERS = ("embedding", "rerank", "generate")


def scripted_settings(data_dir: Path, *, profile: str = "minilm") -> Settings:
    """Settings for an app whose every runner is a :class:`ScriptedRunner` (no vLLM process is started)."""
    return Settings(profile=profile, data_dir=data_dir, api_keys=[API_KEY], generation={"model": GENERATOR})


class Gate:
    """A door that opens once, from any thread, and is awaited in any event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def open(self) -> None:
        with self._lock:
            self._open = True
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:  # that loop has closed (the server stopped): nobody waits any more
                pass

    @property
    def is_open(self) -> bool:
        return self._open

    async def wait(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._open:
                return
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, future))
        await future


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class HeldStream(httpx.AsyncByteStream):
    """Server-sent events, each written only once the one before it was seen downstream (the first at once).

    ``events`` are the ``data:`` payloads in order (a chat answer ends with ``[DONE]``); ``written`` counts
    those the runner has written; ``closed`` opens when the reader closes the response."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self._gates = [Gate() for _ in events]
        if self._gates:
            self._gates[0].open()
        self.written = 0
        self.closed = Gate()

    def observed(self, n: int) -> None:
        """Event ``n`` was seen downstream: the runner may write event ``n + 1`` (past the end: nothing)."""
        if 0 <= n + 1 < len(self._gates):
            self._gates[n + 1].open()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for n, event in enumerate(self.events):
            try:
                await asyncio.wait_for(self._gates[n].wait(), 2 * LIVENESS_S)
            except TimeoutError:  # the test has failed on its side by now; this only frees the server
                raise httpx.ReadError(f"event {n - 1} was never seen downstream") from None
            self.written = n + 1
            yield f"data: {event}\n\n".encode()

    async def aclose(self) -> None:
        """The reader closed the response (httpx's ``Response.aclose``): on a real connection, what makes vLLM
        abort the request. A read that was merely cancelled does not count."""
        self.closed.open()


def chat_chunks(words: list[str], *, model: str = GENERATOR, completion_id: str = "chatcmpl-scripted") -> list[str]:
    """vLLM's streamed chat answer for ``words``: one ``chat.completion.chunk`` per word, then ``[DONE]``."""
    chunks = [
        json.dumps({"id": completion_id, "object": "chat.completion.chunk", "created": 1, "model": model,
                    "choices": [{"index": 0, "delta": {"content": word}, "logprobs": None, "finish_reason": None}]})
        for word in words
    ]
    return [*chunks, "[DONE]"]


async def read_events(response: httpx.Response, stream: HeldStream) -> list[str]:
    """The ``data:`` payloads of ``response`` in order, each acknowledged to ``stream`` as soon as it is read
    (the ``n``-th payload read releases the runner's event ``n + 1``); waits at most :data:`LIVENESS_S` for
    each, and fails naming the event that did not come."""
    lines = response.aiter_lines()
    events: list[str] = []
    while True:
        try:
            line = await asyncio.wait_for(anext(lines), LIVENESS_S)
        except StopAsyncIteration:
            return events
        except TimeoutError:
            raise AssertionError(
                f"event {len(events)} did not reach the client within {LIVENESS_S:g}s although the runner wrote "
                f"{stream.written} event(s) and waits for the client to see event {stream.written - 1} before "
                f"writing more: something between them holds the stream back; seen so far: {events}"
            ) from None
        if line.startswith("data: "):
            stream.observed(len(events))
            events.append(line[6:])


def _vector(text: str, dims: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dims)
    return (v / np.linalg.norm(v)).astype("<f4")


def seeded_score(query: str, document: str) -> float:
    """The default rerank score: in (0, 1), fixed by the pair's text."""
    digest = hashlib.sha256(f"{query}\x00{document}".encode()).digest()
    return (int.from_bytes(digest[:4], "little") + 1) / (2**32 + 2)


@dataclass(frozen=True)
class Sent:
    path: str
    body: dict[str, Any]


class ScriptedRunner:
    """One scripted runner serving every role (embedding, reranker, generator); ``sent`` is every request it
    got, in order. Streamed chat answers are taken from the streams queued with :meth:`hold_stream`; a
    whole (non-streamed) chat answer is ``reply``."""

    def __init__(self, *, dimensions: int, reply: str = "A scripted answer.",
                 rerank_score: Callable[[str, str], float] = seeded_score) -> None:
        self.dimensions = dimensions
        self.reply = reply
        self.rerank_score = rerank_score
        self.sent: list[Sent] = []
        self._streams: deque[HeldStream] = deque()

    @property
    def transports(self) -> Mapping[str, httpx.AsyncBaseTransport]:
        transport = httpx.MockTransport(self.handle)
        return dict.fromkeys(RUNNERS, transport)

    def hold_stream(self, events: list[str]) -> HeldStream:
        """Queue the answer to the next streamed chat request."""
        stream = HeldStream(events)
        self._streams.append(stream)
        return stream

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [s.body for s in self.sent if s.path == path]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content else {}
        self.sent.append(Sent(path, body))
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/embeddings":
            return httpx.Response(200, json=self._embeddings(body))
        if path == "/rerank":
            return httpx.Response(200, json=self._rerank(body))
        if path == "/tokenize":
            text = "".join(str(m.get("content") or "") for m in body.get("messages") or []) + str(body.get("prompt", ""))
            return httpx.Response(200, json={"count": len(text.encode()), "max_model_len": 32_768, "tokens": []})
        if path == "/v1/chat/completions":
            return self._chat(body)
        return httpx.Response(404, json={"object": "error", "message": f"no route {path}", "type": "NotFoundError",
                                         "code": 404})

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dims = int(body.get("dimensions") or self.dimensions)
        vectors = [_vector(t, dims) for t in texts]
        encode: Callable[[np.ndarray], Any] = (
            (lambda v: base64.b64encode(v.tobytes()).decode()) if body.get("encoding_format") == "base64"
            else (lambda v: v.tolist())
        )
        return {"object": "list", "model": body.get("model"),
                "data": [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)}}

    def _rerank(self, body: dict[str, Any]) -> dict[str, Any]:
        query = str(body["query"])
        texts = [d if isinstance(d, str) else str(d.get("text", "")) for d in body["documents"]]
        results = sorted(
            ({"index": i, "document": {"text": t}, "relevance_score": self.rerank_score(query, t)}
             for i, t in enumerate(texts)),
            key=lambda r: -float(r["relevance_score"]),  # type: ignore[arg-type]
        )
        top_n = body.get("top_n") or len(results)
        return {"id": "rerank-scripted", "model": body.get("model"), "results": results[:top_n],
                "usage": {"total_tokens": len(texts)}}

    def _chat(self, body: dict[str, Any]) -> httpx.Response:
        if body.get("stream"):
            if not self._streams:
                return httpx.Response(500, json={"object": "error", "message": "no streamed answer scripted",
                                                 "type": "InternalServerError", "code": 500})
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=self._streams.popleft())
        return httpx.Response(200, json={
            "id": "chatcmpl-scripted", "object": "chat.completion", "created": 1, "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.reply},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })
