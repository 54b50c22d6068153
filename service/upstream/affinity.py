"""The prompt prefix a chat request is routed by, so that it lands where that prefix is already cached.

vLLM's prefix cache keeps the KV blocks of prompts it has seen, keyed by their tokens from the start; with data
parallelism each replica has its own. ragserve lays prompts out stable part first
(:mod:`service.generation.prompts`): the system prompt, the earlier turns, then in the last user turn the image
and the retrieved context, and the question last. The key is a digest of everything before the question:

- every message but the last, whole (the system prompt, the history; images by their data URL's digest);
- the last message's images, and its text up to the grounded layout's ``Question:`` separator: the retrieved
  context (a plain proxied turn has no separator; its text is the new question and is left out).

Requests that share that prefix share a key, and the pool's hash ring sends them to the same replica
(:mod:`service.upstream.routing`). A prompt with nothing before its question has no key (None): any replica
serves it as well as another, so it goes to the one with the fewest requests in flight.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

QUESTION_SEPARATOR = "\n\nQuestion: "
"""Between the context and the question in a grounded user turn (:mod:`service.generation.prompts` writes it): what
precedes it is the cacheable prefix this routes by."""


def prefix_key(messages: Sequence[dict[str, Any]], *, model: str | None = None) -> str | None:
    """The key of a chat request's cacheable prefix; ``model`` (a LoRA adapter has a cache of its own) is part
    of it."""
    if not messages:
        return None
    *before, last = messages
    pieces = [*(piece for m in before for piece in _pieces(m, whole=True)), *_pieces(last, whole=False)]
    if not pieces:
        return None
    digest = hashlib.blake2b(str(model or "").encode(), digest_size=16)
    for piece in pieces:
        digest.update(json.dumps(piece, ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def _pieces(message: dict[str, Any], *, whole: bool) -> Iterator[list[str]]:
    role = str(message.get("role", ""))
    content = message.get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    for part in parts:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "image_url":
            url = str((part.get("image_url") or {}).get("url", ""))
            yield [role, "image", hashlib.sha256(url.encode()).hexdigest()]
        elif part.get("type") == "text":
            text = str(part.get("text") or "")
            if not whole:
                text = text.rpartition(QUESTION_SEPARATOR)[0]
            if text:
                yield [role, "text", text]
