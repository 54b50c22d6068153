"""Async client for a vLLM embedding runner (OpenAI ``/v1/embeddings``).

Queries are formatted with the profile's instruction template (Qwen3: ``Instruct: {task}\\nQuery:{query}``);
documents are sent as they are. Inputs longer than the model's window are truncated by the runner
(``truncate_prompt_tokens``) so a long chunk never fails a whole batch; :meth:`EmbeddingClient.check_fits`
is the other choice, for the OpenAI route's ``truncate: NONE``.

Queries (and the passthrough) travel in the runner client's ``query`` lane; documents in the ``bulk`` lane, so
indexing never makes a search wait for a slot (:mod:`service.upstream.lanes`).

Vectors travel as base64 float32 (``encoding_format: base64``): the same bytes the runner computed, a
quarter of the JSON text, and decoded by numpy instead of parsed number by number on the event loop (a
batch of 600 vectors of 1024 dims is 600k floats).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Sequence
from typing import Any

import numpy as np

from service.errors import InvalidInput
from service.profiles import EmbeddingModel
from service.upstream.errors import UpstreamError, UpstreamRejected
from service.upstream.lanes import Lane
from service.upstream.runner import RunnerClient

Query = tuple[str, "asyncio.Future[list[float]]"]
"""A query's text, as the runner gets it, and its caller's future."""

SPECIAL_TOKENS_BOUND = 8
"""More than any tokenizer here adds to a text (BERT's [CLS] and [SEP], Qwen3's end of text)."""


class EmbeddingClient:
    def __init__(
        self,
        runner: RunnerClient,
        model: EmbeddingModel,
        *,
        dimensions: int | None = None,
        truncate_tokens: int | None = None,
        query_task: str | None = None,
        batch_size: int = 64,
        batch_timeout_s: float | None = None,
    ) -> None:
        self.runner = runner
        self.model = model
        self.dimensions = dimensions or model.dimensions
        """Default output size; a collection created with another Matryoshka size asks for its own."""
        self.truncate_tokens = truncate_tokens or model.max_tokens
        self._query_task = query_task
        self._batch_size = batch_size
        self._batch_timeout_s = batch_timeout_s
        self._waiting: dict[int, tuple[asyncio.AbstractEventLoop, list[Query]]] = {}
        """Queries of this turn of the loop, by output size, sent at its end (:meth:`_send_queries`)."""
        self._sending: set[asyncio.Task[None]] = set()
        self._bulk_in_flight = 0
        """Bulk requests of this client sent or waiting for a slot: while there are any, each query travels alone."""

    async def embed_query(
        self, query: str, *, task: str | None = None, dimensions: int | None = None
    ) -> list[float]:
        """The query's vector. Queries asked for in one turn of the event loop (many searches in flight) travel
        to the runner together, one request per output size, each answered its own vector
        (:meth:`_send_queries`); one alone is sent at the end of its turn, as it came. While this client has
        bulk requests out (indexing), each query is its own request: each input is its own request in vLLM's
        engine and a shared request answers when its slowest input is done, which behind bulk work lengthened
        the search tail (docs/benchmarks.md, stop 34)."""
        text = self.model.format_query(query, task or self._query_task)
        dims = dimensions or self.dimensions
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[float]] = loop.create_future()
        turn = self._waiting.get(dims)
        if turn is None or turn[0] is not loop:  # none yet, or one left by a loop that ended before sending it
            turn = self._waiting[dims] = (loop, [])
            loop.call_soon(self._send_queries, dims, turn)
        turn[1].append((text, future))
        return await future

    def _send_queries(self, dims: int, turn: tuple[asyncio.AbstractEventLoop, list[Query]]) -> None:
        """Send the queries of the turn that just ended, up to ``batch_size`` per request, or one per request
        while bulk requests are in flight. A request whose callers were all cancelled is cancelled; one caller
        cancelled leaves the others' answers alone."""
        if self._waiting.get(dims) is turn:
            del self._waiting[dims]
        waiting = [(text, f) for text, f in turn[1] if not f.done()]
        size = 1 if self._bulk_in_flight else self._batch_size
        for start in range(0, len(waiting), size):
            part = waiting[start:start + size]
            task = asyncio.get_running_loop().create_task(self._answer_queries(part, dims))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
            left = [len(part)]

            def abandoned(f: asyncio.Future[list[float]], task: asyncio.Task[None] = task,
                          left: list[int] = left) -> None:
                if f.cancelled():
                    left[0] -= 1
                    if not left[0]:
                        task.cancel()

            for _, f in part:
                f.add_done_callback(abandoned)

    async def _answer_queries(self, waiting: list[Query], dims: int) -> None:
        try:
            vectors = await self._embed_batch([text for text, _ in waiting], timeout_s=None, dimensions=dims,
                                              lane="query", wait_while_down=False)
        except UpstreamRejected as exc:
            if len(waiting) == 1:
                _fail(waiting, exc)
                return
            # The runner refused the request for one input or another: each query alone, so that only a query
            # that is refused on its own fails.
            await asyncio.gather(*(self._answer_queries([w], dims) for w in waiting))
            return
        except asyncio.CancelledError:
            for _, f in waiting:
                f.cancel()
            raise
        except BaseException as exc:  # noqa: BLE001 - every caller hears what its request met
            _fail(waiting, exc)
            return
        for (_, f), vector in zip(waiting, vectors.tolist(), strict=True):
            if not f.done():
                f.set_result(vector)

    async def embed_documents(
        self, texts: Sequence[str], *, dimensions: int | None = None, lane: Lane = "bulk",
        wait_while_down: bool = False,
    ) -> list[list[float]]:
        """Embed ``texts`` in batches sent concurrently (bounded by the runner client's slots of ``lane``);
        ``wait_while_down`` waits out a runner that is down (within the batch timeout) instead of failing."""
        batches = [texts[i : i + self._batch_size] for i in range(0, len(texts), self._batch_size)]
        results = await asyncio.gather(*(
            self._embed_batch(list(b), timeout_s=self._batch_timeout_s, dimensions=dimensions, lane=lane,
                              wait_while_down=wait_while_down)
            for b in batches
        ))
        return [vector for batch in results for vector in await _as_lists(batch)]

    async def embed_batch(
        self, texts: list[str], *, dimensions: int | None = None, lane: Lane = "bulk", wait_while_down: bool = False,
    ) -> list[list[float]]:
        """Exactly one request for ``texts``."""
        return await _as_lists(await self.embed_matrix(texts, dimensions=dimensions, lane=lane,
                                                       wait_while_down=wait_while_down))

    async def embed_matrix(
        self, texts: list[str], *, dimensions: int | None = None, lane: Lane = "bulk", wait_while_down: bool = False,
    ) -> np.ndarray:
        """Exactly one request for ``texts``, its vectors as the rows of one float32 matrix: the indexer's form
        (it sizes its batches by tokens itself). A list of floats per vector is a container the garbage
        collector walks float by float, holding the GIL, and a large job keeps thousands in flight; a matrix is
        one object it never walks (docs/benchmarks.md has the figures)."""
        return await self._embed_batch(texts, timeout_s=self._batch_timeout_s, dimensions=dimensions, lane=lane,
                                       wait_while_down=wait_while_down)

    async def passthrough(self, body: dict[str, Any]) -> Any:
        """Forward an OpenAI-style request as it is, with the served model name filled in."""
        body = {**body, "model": self.model.name}
        return await self.runner.post_json("/v1/embeddings", body, lane="query")

    async def check_fits(self, texts: Sequence[str], *, single: bool = False) -> None:
        """Refuse (422 ``input_too_long``, param ``input[i]``, or ``input`` when ``single``) the first text longer
        than the window, counted by the runner's own ``/tokenize``; a text short by an upper bound (a token
        spends at least one UTF-8 byte) costs no call."""
        suspects = [i for i, t in enumerate(texts) if len(t.encode()) + SPECIAL_TOKENS_BOUND > self.truncate_tokens]
        counts = await asyncio.gather(*(self._count_tokens(texts[i]) for i in suspects))
        for i, count in zip(suspects, counts, strict=True):
            if count > self.truncate_tokens:
                where = "input" if single else f"input[{i}]"
                raise InvalidInput(
                    f"{where} is {count} tokens long, over the embedding model's window of {self.truncate_tokens} "
                    "tokens (truncate: NONE); shorten it, or send truncate: END to have it cut to the window",
                    code="input_too_long", param=where)

    async def _count_tokens(self, text: str) -> int:
        payload = await self.runner.post_json("/tokenize", {"model": self.model.name, "prompt": text,
                                                            "add_special_tokens": True}, lane="query")
        try:
            return int(payload["count"])
        except (KeyError, TypeError, ValueError) as exc:
            raise UpstreamError(self.runner.name, "tokenize response has an unexpected shape") from exc

    async def _embed_batch(
        self, texts: list[str], *, timeout_s: float | None, dimensions: int | None, lane: Lane,
        wait_while_down: bool,
    ) -> np.ndarray:
        dims = dimensions or self.dimensions
        body: dict[str, Any] = {
            "model": self.model.name,
            "input": texts,
            "encoding_format": "base64",
            "truncate_prompt_tokens": self.truncate_tokens,
        }
        if dims != self.model.dimensions:
            body["dimensions"] = dims
        bulk = lane == "bulk"
        self._bulk_in_flight += bulk
        try:
            payload = await self.runner.post_json("/v1/embeddings", body, timeout_s=timeout_s, lane=lane,
                                                  wait_while_down=wait_while_down)
        finally:
            self._bulk_in_flight -= bulk
        try:
            data = sorted(payload["data"], key=lambda item: item["index"])
            # A bulk batch (thousands of vectors) is decoded off the event loop; a query's one vector in place.
            raw = _decode(data) if len(data) <= 16 else await asyncio.to_thread(_decode, data)
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise UpstreamError(self.runner.name, "embedding response has an unexpected shape") from exc
        widths = {len(v) / 4 for v in raw} - {dims}
        if len(raw) != len(texts) or widths:
            raise UpstreamError(
                self.runner.name,
                f"expected {len(texts)} vectors of {dims} dims, got {len(raw)}"
                + (f", of {', '.join(f'{w:g}' for w in sorted(widths))} dims" if widths else ""),
            )
        return np.frombuffer(b"".join(raw), dtype="<f4").reshape(len(raw), dims)


def _fail(waiting: list[Query], exc: BaseException) -> None:
    for _, f in waiting:
        if not f.done():
            f.set_exception(exc)


def _decode(data: list[dict[str, Any]]) -> list[bytes]:
    return [base64.b64decode(item["embedding"]) for item in data]


async def _as_lists(matrix: np.ndarray) -> list[list[float]]:
    """The rows as lists of floats (what JSON and the callers of the list forms take); a bulk batch's off the
    event loop, a row at a time, so the loop gets the GIL between rows."""
    if len(matrix) <= 16:
        return matrix.tolist()  # type: ignore[no-any-return]
    return await asyncio.to_thread(lambda: [row.tolist() for row in matrix])
