"""A conversation rewritten into one standalone question by the generator, for retrieval.

The prompt is versioned (:data:`REWRITE_PROMPT_VERSION`, raised whenever its text changes, and sent in the
system turn so a log shows which one wrote a query). The request goes through the generator's query lane with
its own deadline (``RAGSERVE_CONTEXT__REWRITE_TIMEOUT_S``), greedy, short. Whatever goes wrong (an empty answer,
one longer than a query may be, an error, the deadline) falls back to the rule of
:mod:`service.context.conversation`, and the result says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.errors import RagserveError
from service.upstream.generation import GenerationClient

REWRITE_PROMPT_VERSION = 1
REWRITE_SYSTEM_PROMPT = (
    f"[query-rewrite v{REWRITE_PROMPT_VERSION}] You rewrite the user's last message in a conversation as one "
    "standalone search question. Replace words that refer back (it, its, they, that) with what they refer to, "
    "keep the user's terms, add nothing else. Reply with the question only, on one line."
)


@dataclass(frozen=True)
class Rewritten:
    query: str | None
    """The standalone question; None when the rule must be used instead."""
    fallback: str | None = None
    """Why the rule was used: ``empty``, ``too_long``, ``failed: <code>`` or ``timeout``."""


def rewrite_messages(turns: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """The conversation as a transcript, its last user message marked: ``turns`` are (role, text)."""
    lines = [f"{'User' if role == 'user' else 'Assistant'}: {' '.join(text.split())}" for role, text in turns if text]
    transcript = "\n".join(lines)
    return [{"role": "system", "content": REWRITE_SYSTEM_PROMPT},
            {"role": "user", "content": f"Conversation:\n{transcript}\n\nStandalone question:"}]


class QueryRewriter:
    def __init__(self, generator: GenerationClient, *, timeout_s: float, max_tokens: int, max_chars: int) -> None:
        self.generator = generator
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self.max_chars = max_chars

    def body(self, turns: Sequence[tuple[str, str]]) -> dict[str, object]:
        return {"model": self.generator.model.name, "messages": rewrite_messages(turns),
                "max_tokens": self.max_tokens, "temperature": 0.0}

    async def rewrite(self, turns: Sequence[tuple[str, str]]) -> Rewritten:
        try:
            text = await self.generator.complete_query(self.body(turns), timeout_s=self.timeout_s)
        except TimeoutError:
            return Rewritten(None, "timeout")
        except RagserveError as exc:
            return Rewritten(None, "timeout" if exc.code == "upstream_timeout" else f"failed: {exc.code}")
        query = " ".join(text.split())
        if not query:
            return Rewritten(None, "empty")
        if len(query) > self.max_chars:
            return Rewritten(None, "too_long")
        return Rewritten(query)
