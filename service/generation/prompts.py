"""Prompts for the generator: the grounded answer, the image-to-search-query rewrite, and the description of a
picture being indexed.

Layout is chosen for vLLM's prefix cache (and its multimodal processor cache): what stays the same across
requests comes first, what changes comes last. A grounded conversation is sent as

    system    ragserve's grounding instructions (+ the caller's own system text)     same every time
    ...       earlier turns, as the caller sent them                                   same within a chat
    user      [image]  Context: [1] ... [2] ...  Question: ...                         image before context

so a second question about the same image reuses the KV blocks of the system prompt and of the image,
and only the context and question are computed again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.upstream.affinity import QUESTION_SEPARATOR

GROUNDED_SYSTEM_PROMPT = (
    "You answer questions using only the numbered context passages given with the question. "
    "Cite every passage you use by its number in square brackets, like [1] or [2][3]. "
    "If the passages do not contain the answer, say that you do not know; do not guess. "
    "When the user shows an image, use what it shows together with the passages."
)
IMAGE_QUERY_SYSTEM_PROMPT = (
    "You write search queries. Describe the image in one short line for a search engine: what it shows, "
    "and any text visible in it, copied exactly. If the user asks something, include the key terms of the "
    "question. Reply with the query only."
)

DESCRIBE_SYSTEM_PROMPT = (
    "You describe pictures for a search index. First transcribe the text visible in the picture, exactly as "
    "written, line by line. Then describe the figure: what it shows (a chart, diagram, table, photo, screenshot), "
    "its parts, labels, axes, values and what it conveys. Write plain sentences, no preamble. If there is no "
    "text, say so in one line and only describe the figure."
)
DESCRIBE_INSTRUCTION = "Transcribe the visible text, then describe the figure."
DESCRIBE_PROMPT_VERSION = 1
"""Raised whenever the two texts above change: it is part of every described file's change hash
(:mod:`indexer.vision`), so a new prompt describes every picture again, once."""




def format_context(context: str, question: str) -> str:
    """``context``: the numbered passages as ``/v1/context`` renders them."""
    block = f"Context:\n{context}" if context else "Context: (no passages were found)"
    return f"{block}{QUESTION_SEPARATOR}{question}"


def grounded_messages(
    messages: Sequence[dict[str, Any]],
    context: str,
    question: str,
    *,
    system_prompt: str = GROUNDED_SYSTEM_PROMPT,
) -> list[dict[str, Any]]:
    """The conversation with the grounding system prompt first and the context in the last user turn.

    ``messages`` are upstream-ready (images already data URLs); the last one is the user turn being
    answered. Its image parts are kept, first; its text is replaced by context + question.
    """
    caller_system = [text_of(m) for m in messages if m["role"] == "system"]
    system = "\n\n".join([system_prompt, *[s for s in caller_system if s]])
    history = [m for m in messages[:-1] if m["role"] != "system"]
    last = messages[-1]
    images = [p for p in _parts(last) if p.get("type") == "image_url"]
    final = {"role": "user", "content": [*images, {"type": "text", "text": format_context(context, question)}]}
    return [{"role": "system", "content": system}, *history, final]


def image_query_messages(image_data_url: str, text: str) -> list[dict[str, Any]]:
    """Image first (cacheable), then the user's words."""
    ask = f"Question: {text}\nSearch query:" if text else "Search query:"
    return [
        {"role": "system", "content": IMAGE_QUERY_SYSTEM_PROMPT},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_data_url}},
                                     {"type": "text", "text": ask}]},
    ]


def describe_messages(image_data_url: str) -> list[dict[str, Any]]:
    """The same system prompt and instruction for every picture; the picture is what differs."""
    return [
        {"role": "system", "content": DESCRIBE_SYSTEM_PROMPT},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_data_url}},
                                     {"type": "text", "text": DESCRIBE_INSTRUCTION}]},
    ]


def _parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def text_of(message: dict[str, Any]) -> str:
    """The text parts of a message, joined."""
    return "\n".join(p["text"] for p in _parts(message) if p.get("type") == "text").strip()
