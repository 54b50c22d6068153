"""Chat completions: a plain proxy to the generation runner, or a grounded answer with citations.

Every request is prepared before anything is sent upstream, so bad input is a 4xx in the error envelope
and never a half-written stream: the model name is resolved (base model or a declared LoRA adapter), the
images are counted, fetched or decoded, checked and re-encoded as data URLs (:mod:`service.media`), and,
with the ``ragserve`` extension, context is retrieved and reranked for the last user turn (an image in
that turn is first turned into a search query by the VL model) and the grounded prompt is built
(:mod:`service.generation.prompts`). Only then is the completion requested, whole or streamed.

A streamed answer is forwarded event by event as vLLM sends it; ragserve adds one last chunk (empty
``choices``) carrying ``ragserve.citations`` before ``data: [DONE]``. If the client goes away, leaving the
stream closes the upstream connection and vLLM aborts the request.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from service.config import Settings
from service.context.service import ContextRequest, ContextService, Turn
from service.errors import InvalidInput, RagserveError
from service.generation.citations import Citation, build_citations, mark_cited
from service.generation.prompts import GROUNDED_SYSTEM_PROMPT, grounded_messages, text_of
from service.generation.request import ChatRequest, ImageContent
from service.media.images import PreparedImage
from service.media.service import ImageInput, MediaService
from service.observability.tracing import stage, tracer
from service.search.retrieval import Params
from service.store.tenancy import Tenant
from service.upstream.generation import GenerationClient

StageObserver = Callable[[str, float], None]
CHAT_PARAMS = Params(query="messages", top_k="ragserve.top_k", rerank_candidates="ragserve.rerank_candidates")


@dataclass
class PreparedChat:
    body: dict[str, Any]
    """What is sent to the runner."""
    model: str
    citations: list[Citation] | None = None
    """None in proxy mode (no ``ragserve`` extension)."""
    retrieval: dict[str, Any] = field(default_factory=dict)
    search_id: str | None = None
    """The grounding search's id, for feedback on the passages cited."""

    def extension(self) -> dict[str, Any]:
        return {"search_id": self.search_id, "citations": [c.to_dict() for c in self.citations or []],
                "retrieval": self.retrieval}


class ChatHandler:
    def __init__(
        self,
        generator: GenerationClient,
        media: MediaService,
        context: ContextService,
        settings: Settings,
        *,
        observe_stage: StageObserver | None = None,
    ) -> None:
        self.generator = generator
        self.media = media
        self.context = context
        self.settings = settings
        self._observe = observe_stage or (lambda stage, seconds: None)

    async def prepare(self, request: ChatRequest, *, tenant: Tenant | None = None,
                      cache_partition: str | None = None, key_id: str = "") -> PreparedChat:
        """``tenant``: the asking key's; grounding retrieves from its chunks only. ``cache_partition``: the asking
        key's partition of the query-embedding cache (:class:`service.search.service.SearchQuery`)."""
        model = self.generator.resolve_model(request.model)
        gen = self.settings.generation
        max_tokens = request.max_tokens or gen.max_tokens
        if max_tokens > gen.max_tokens:
            raise InvalidInput(f"max_tokens is over {gen.max_tokens}", code="max_tokens_too_large",
                               param="max_tokens")
        messages, last_image = await self._messages(request)
        body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
        body.update(request.sampling)
        if request.include_usage:
            body["stream_options"] = {"include_usage": True}
        prepared = PreparedChat(body, model)
        if request.grounding is not None:
            await self.generator.check_available()  # a generator known down: 503 now, not after retrieval
            await self._ground(request, prepared, last_image, tenant, cache_partition, key_id)
        return prepared

    async def complete(self, prepared: PreparedChat) -> dict[str, Any]:
        started = time.perf_counter()
        with stage("generate", model=prepared.model, stream=False):
            payload = await self.generator.complete(prepared.body)
        self._observe("generate", time.perf_counter() - started)
        if prepared.citations is not None:
            message = payload["choices"][0].get("message") or {}
            mark_cited(prepared.citations, str(message.get("content") or ""))
            payload["ragserve"] = prepared.extension()
        return payload

    async def open_stream(self, prepared: PreparedChat) -> AsyncIterator[bytes]:
        """Open the upstream stream now (so its refusal is still an ordinary error response) and return
        the server-sent events to send; iterating them to the end, or abandoning them, closes upstream."""
        stack = AsyncExitStack()
        # The span covers the whole answer and ends when the relay closes the stack (end, error or abandon),
        # perhaps in another task than this one: so it is never made the current span of this context.
        span = tracer.start_span("generate", attributes={"ragserve.model": prepared.model, "ragserve.stream": True})
        stack.callback(span.end)
        try:
            events = await stack.enter_async_context(self.generator.stream(prepared.body))
        except BaseException:
            await stack.aclose()
            raise
        return self._relay(prepared, events, stack)

    async def _relay(
        self, prepared: PreparedChat, events: AsyncIterator[tuple[str, Any]], stack: AsyncExitStack
    ) -> AsyncIterator[bytes]:
        answer: list[str] = []
        head: dict[str, Any] = {}
        started = time.perf_counter()
        try:
            async for raw, event in events:
                if isinstance(event, dict):
                    head = head or {k: event[k] for k in ("id", "created") if k in event}
                    for choice in event.get("choices") or []:
                        content = (choice.get("delta") or {}).get("content")
                        if content:
                            answer.append(content)
                yield f"data: {raw}\n\n".encode()
            self._observe("generate", time.perf_counter() - started)
            if prepared.citations is not None:
                mark_cited(prepared.citations, "".join(answer))
                final = {**head, "object": "chat.completion.chunk", "model": prepared.model, "choices": [],
                         "ragserve": prepared.extension()}
                yield f"data: {json.dumps(final)}\n\n".encode()
            yield b"data: [DONE]\n\n"
        except RagserveError as exc:  # the stream has started: the error can only be an event now
            error = {"type": exc.type, "code": exc.code, "message": exc.message}
            yield f"data: {json.dumps({'error': error})}\n\n".encode()
        finally:
            await stack.aclose()

    async def _messages(self, request: ChatRequest) -> tuple[list[dict[str, Any]], PreparedImage | None]:
        """Upstream-ready messages (every image a data URL made here) and the last message's image."""
        found: list[tuple[int, int, str]] = []
        for i, message in enumerate(request.turns):
            for j, part in enumerate(message.content if isinstance(message.content, list) else []):
                if isinstance(part, ImageContent):
                    if message.role != "user":
                        raise InvalidInput("images are accepted in user messages only",
                                           code="image_not_in_user_message", param=f"messages[{i}].content[{j}]")
                    found.append((i, j, part.url))
        self.media.check_count(len(found), param="messages")
        started = time.perf_counter()
        prepared = await asyncio.gather(*(
            self.media.prepare(ImageInput(param=f"messages[{i}].content[{j}].image_url.url", url=url))
            for i, j, url in found
        ))
        if found:
            self._observe("image", time.perf_counter() - started)
        images = {(i, j): image for (i, j, _), image in zip(found, prepared, strict=True)}
        out: list[dict[str, Any]] = []
        for i, message in enumerate(request.turns):
            if not isinstance(message.content, list):
                out.append({"role": message.role, "content": message.content})
                continue
            parts: list[dict[str, Any]] = []
            for j, part in enumerate(message.content):
                if isinstance(part, ImageContent):
                    parts.append({"type": "image_url", "image_url": {"url": images[(i, j)].data_url}})
                else:
                    parts.append({"type": "text", "text": part.text})
            out.append({"role": message.role, "content": parts})
        last = len(request.turns) - 1
        last_image = next((img for (i, _), img in images.items() if i == last), None)
        return out, last_image

    async def _ground(
        self, request: ChatRequest, prepared: PreparedChat, image: PreparedImage | None,
        tenant: Tenant | None, cache_partition: str | None, key_id: str = "",
    ) -> None:
        """The prompt's context is ``/v1/context``'s for this conversation (the same passages, numbering and
        template), in a budget that leaves the conversation and the answer room in the generator's window."""
        options = request.grounding
        assert options is not None
        messages = prepared.body["messages"]
        if messages[-1]["role"] != "user":
            raise InvalidInput("the last message must be the user's question to retrieve context for it",
                               code="last_message_not_user", param="messages")
        gen = self.settings.generation
        question = text_of(messages[-1])
        top_k = options.top_k or gen.context_top_k
        self.context.retrieval.check(query=question, top_k=top_k, rerank_candidates=options.rerank_candidates,
                                     has_image=image is not None, params=CHAT_PARAMS)
        system_prompt = gen.system_prompt or GROUNDED_SYSTEM_PROMPT
        budget = await self._budget(options.budget_tokens, messages, system_prompt, prepared.body["max_tokens"])
        turns = [Turn(m["role"], text_of(m), image if i == len(messages) - 1 else None)
                 for i, m in enumerate(messages) if m["role"] != "system"]
        result = await self.context.assemble(ContextRequest(
            collections=list(options.collections), budget_tokens=budget, messages=turns, filter=options.filter,
            rerank=options.rerank, rerank_candidates=options.rerank_candidates, max_passages=top_k,
            rewrite=options.rewrite,
        ), tenant=tenant, cache_partition=cache_partition, key_id=key_id)
        prepared.search_id = result.search_id
        prepared.body["messages"] = grounded_messages(
            messages, result.context, question or "What does the image show?", system_prompt=system_prompt
        )
        prepared.citations = build_citations(result.passages)
        prepared.retrieval = {
            "collections": list(dict.fromkeys(options.collections)), "query": result.query_used,
            "generated_query": result.generated_query, "reranked": result.reranked, "timings_ms": result.timings_ms,
            "budget_tokens": budget, "tokens": result.tokens, "tokenizer": result.tokenizer,
        }
        if result.rewrite is not None:
            prepared.retrieval["rewrite"] = {"used": result.rewrite.used, "fallback": result.rewrite.fallback,
                                             "prompt_version": result.rewrite.prompt_version}

    async def _budget(self, asked: int | None, messages: list[dict[str, Any]], system_prompt: str,
                      max_tokens: int) -> int:
        """The context's budget: the request's (``ragserve.budget_tokens``), refused when it, the conversation
        and ``max_tokens`` together pass the generator's window; else the deployment's, shrunk to what the
        window leaves. The conversation is counted as text (its images are not counted)."""
        gen = self.settings.generation
        window = gen.max_model_len
        counter = self.context.tokenizers.get(None)
        conversation = await counter.count("\n".join([system_prompt, *(text_of(m) for m in messages)]))
        left = window - conversation - max_tokens
        if asked is not None and asked > left:
            raise InvalidInput(
                f"budget_tokens {asked}, the conversation ({conversation} tokens) and max_tokens {max_tokens} "
                f"together pass the generator's window of {window} tokens", code="context_window_exceeded",
                param="ragserve.budget_tokens")
        budget = asked if asked is not None else min(gen.context_budget(), left)
        if budget < 1:
            raise InvalidInput(f"the conversation ({conversation} tokens) and max_tokens {max_tokens} leave no room "
                               f"for context in the generator's window of {window} tokens",
                               code="context_window_exceeded", param="messages")
        return budget

    def _stage(self, stage: str, started: float) -> float:
        seconds = time.perf_counter() - started
        self._observe(stage, seconds)
        return round(seconds * 1000, 3)
