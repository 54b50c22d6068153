"""The query a conversation retrieves for, without a generator: a documented rule.

The last user turn is the query. When it is a short follow-up ("and what about its drag?") it does not stand
alone, so the user turns before it are put in front of it, most recent nearest, as many as fit
``max_chars``. A turn is a follow-up when it has at most ``FOLLOW_UP_WORDS`` words, or opens with a word that
leans on what came before (``and``, ``what about``, ``also``...), or refers back with a pronoun (``it``,
``its``, ``they``, ``this``...). Assistant and system turns are not searched for: the user's words are what
the documents must answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

FOLLOW_UP_WORDS = 8
EARLIER_TURNS = 2
"""User turns put in front of a follow-up, at most."""
_OPENERS = re.compile(r"^\s*(and|but|or|so|also|then|what about|how about|why|what else|same|more)\b", re.I)
_BACK_REFERENCES = re.compile(r"\b(it|its|it's|they|them|their|theirs|this|that|these|those|he|she|his|her|"
                              r"him|there|one|ones|former|latter)\b", re.I)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class ConversationQuery:
    query: str
    follow_up: bool
    """The last turn was taken for a follow-up, so earlier user turns were put in front of it."""


def is_follow_up(text: str) -> bool:
    return (len(_WORD.findall(text)) <= FOLLOW_UP_WORDS or bool(_OPENERS.match(text))
            or bool(_BACK_REFERENCES.search(text)))


def conversation_query(user_turns: Sequence[str], *, max_chars: int) -> ConversationQuery:
    """``user_turns``: the text of each user turn, in order (the last is the question). The last turn alone
    when it stands alone; else it with up to ``EARLIER_TURNS`` earlier ones in front, one a line."""
    turns = [t.strip() for t in user_turns if t.strip()]
    if not turns:
        return ConversationQuery("", False)
    last = turns[-1]
    if len(turns) == 1 or not is_follow_up(last):
        return ConversationQuery(last, False)
    parts = [last]
    for earlier in reversed(turns[:-1][-EARLIER_TURNS:]):
        if sum(len(p) + 1 for p in parts) + len(earlier) > max_chars:
            break
        parts.insert(0, earlier)
    return ConversationQuery("\n".join(parts), len(parts) > 1)
