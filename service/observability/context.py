"""The request a line of code runs for, in a contextvar: its id and the key id that made it.

Set by :class:`service.observability.requests.RequestContextMiddleware` for every HTTP request (and by the
indexing pipeline for every job); read by the logging filter, so every log line names its request. asyncio
tasks copy the context when created, so work a request fans out keeps the id.
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar, Token
from dataclasses import dataclass

REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


@dataclass
class RequestContext:
    request_id: str
    key_id: str | None = None
    """Filled in once the request's key is checked (a label, never the key)."""


_current: ContextVar[RequestContext | None] = ContextVar("ragserve_request", default=None)


def current() -> RequestContext | None:
    return _current.get()


def bind(context: RequestContext) -> Token[RequestContext | None]:
    return _current.set(context)


def unbind(token: Token[RequestContext | None]) -> None:
    _current.reset(token)


def accept_request_id(offered: str | None) -> str:
    """The caller's ``X-Request-ID`` when it is a sane token (so ids join across services), else a new one;
    anything else (too long, spaces, control characters that could forge log lines) is replaced."""
    if offered and REQUEST_ID_RE.match(offered):
        return offered
    return uuid.uuid4().hex
