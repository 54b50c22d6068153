"""Streamed chat: server-sent events decoded once (:class:`ChatStreamDecoder`), read by a sync and an async
stream object that only move lines from the response into it.

The server forwards vLLM's ``chat.completion.chunk`` events, then one chunk with empty ``choices`` carrying
``ragserve.citations`` and ``ragserve.search_id`` (grounded chat), then ``data: [DONE]``. An error after the stream
has started comes as an ``{"error": {...}}`` event and is raised from the iteration as the matching exception.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from .errors import ConnectionFailed, error_from_event
from .models import ChatResult, Citation, Retrieval
from .steps import Call


class Opens(Protocol):
    """What a stream needs of :class:`~service.client.Client`: sending the request (an error answer raised)."""

    def _open(self, call: Call) -> httpx.Response: ...


class AsyncOpens(Protocol):
    """The same of :class:`~service.client.AsyncClient`."""

    async def _open(self, call: Call) -> httpx.Response: ...


def chat_result(payload: dict[str, Any]) -> ChatResult:
    choice = (payload.get("choices") or [{}])[0]
    ext = payload.get("ragserve") or {}
    return ChatResult(
        id=payload.get("id"), model=payload.get("model", ""),
        content=str((choice.get("message") or {}).get("content") or ""), finish_reason=choice.get("finish_reason"),
        citations=[Citation.model_validate(c) for c in ext.get("citations") or []],
        retrieval=Retrieval.model_validate(ext["retrieval"]) if ext.get("retrieval") else None,
        search_id=ext.get("search_id"), usage=payload.get("usage"),
    )


class ChatStreamDecoder:
    """Feeds on the lines of an event stream; hands back the text deltas and keeps the rest."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.id: str | None = None
        self.model = ""
        self.finish_reason: str | None = None
        self.citations: list[Citation] = []
        self.retrieval: Retrieval | None = None
        self.search_id: str | None = None
        self.usage: dict[str, Any] | None = None
        self.done = False

    def feed(self, line: str) -> list[str]:
        if not line.startswith("data:"):
            return []  # blank separators, comments, event names
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return []
        event = json.loads(data)
        if "error" in event:
            raise error_from_event(event)
        self.id = self.id or event.get("id")
        self.model = self.model or event.get("model", "")
        self.usage = event.get("usage") or self.usage
        deltas = []
        for choice in event.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                deltas.append(content)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        ext = event.get("ragserve")
        if ext:
            self.citations = [Citation.model_validate(c) for c in ext.get("citations") or []]
            self.retrieval = Retrieval.model_validate(ext["retrieval"]) if ext.get("retrieval") else None
            self.search_id = ext.get("search_id")
        self.parts.extend(deltas)
        return deltas

    def finish(self) -> None:
        if not self.done:
            raise ConnectionFailed("the answer stream ended before [DONE]")

    def result(self) -> ChatResult:
        return ChatResult(id=self.id, model=self.model, content="".join(self.parts), finish_reason=self.finish_reason,
                          citations=self.citations, retrieval=self.retrieval, search_id=self.search_id,
                          usage=self.usage)


@dataclass(frozen=True)
class StreamCall:
    """A streamed exchange: the request, and the decoder its server-sent events go through."""

    call: Call
    decoder: Callable[[], ChatStreamDecoder]


class _StreamView:
    _decoder: ChatStreamDecoder

    @property
    def text(self) -> str:
        """The answer so far."""
        return "".join(self._decoder.parts)

    @property
    def citations(self) -> list[Citation]:
        """The passages the answer was given (after the stream has ended; empty without ``collections``)."""
        return self._decoder.citations

    @property
    def retrieval(self) -> Retrieval | None:
        return self._decoder.retrieval

    @property
    def search_id(self) -> str | None:
        """The grounding search's id, for feedback (after the stream has ended; None without ``collections``)."""
        return self._decoder.search_id

    @property
    def finish_reason(self) -> str | None:
        return self._decoder.finish_reason

    def result(self) -> ChatResult:
        """The whole answer as :meth:`Client.chat` would have returned it (once the stream has ended)."""
        return self._decoder.result()


class ChatStream(_StreamView):
    """``with client.chat_stream(...) as stream: for delta in stream: ...``; the request is sent on entry
    (or on first iteration), so a refusal raises there, before any text."""

    def __init__(self, client: Opens, call: StreamCall) -> None:
        self._client, self._call, self._decoder = client, call.call, call.decoder()
        self._response: httpx.Response | None = None

    def __enter__(self) -> ChatStream:
        self._open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> httpx.Response:
        if self._response is None:
            self._response = self._client._open(self._call)
        return self._response

    def __iter__(self) -> Iterator[str]:
        response = self._open()
        try:
            for line in response.iter_lines():
                yield from self._decoder.feed(line)
            self._decoder.finish()
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"the answer stream broke: {exc}") from exc
        finally:
            self.close()

    def close(self) -> None:
        if self._response is not None:
            self._response.close()


class AsyncChatStream(_StreamView):
    """``async with client.chat_stream(...) as stream: async for delta in stream: ...``"""

    def __init__(self, client: AsyncOpens, call: StreamCall) -> None:
        self._client, self._call, self._decoder = client, call.call, call.decoder()
        self._response: httpx.Response | None = None

    async def __aenter__(self) -> AsyncChatStream:
        await self._open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _open(self) -> httpx.Response:
        if self._response is None:
            self._response = await self._client._open(self._call)
        return self._response

    async def __aiter__(self) -> AsyncIterator[str]:
        response = await self._open()
        try:
            async for line in response.aiter_lines():
                for delta in self._decoder.feed(line):
                    yield delta
            self._decoder.finish()
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"the answer stream broke: {exc}") from exc
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        if self._response is not None:
            await self._response.aclose()
