"""What the client raises: ragserve's error envelope ``{"error": {type, code, message, param}}`` as typed
exceptions, picked by HTTP status, and the failures where no answer came at all.

Hierarchy::

    RagserveClientError
    ├── APIError                      the server answered an error: status_code, type, code, message, param
    │   ├── InvalidRequest (400, 415, 422)
    │   │   └── PayloadTooLarge (413)
    │   ├── Unauthorized (401)
    │   ├── Forbidden (403)
    │   ├── NotFound (404)
    │   ├── Conflict (409)
    │   ├── RateLimited (429)         retry_after: seconds, from Retry-After
    │   └── ServerError (5xx)
    │       ├── Unavailable (503)     retry_after when the server named one (a runner overloaded)
    │       └── Timeout (504)         also raised, with status_code None, when the client's own timeout passed
    └── ConnectionFailed              no answer: refused, reset, DNS
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class RagserveClientError(Exception):
    """Everything the ragserve client raises."""


class ConnectionFailed(RagserveClientError):
    """The server could not be reached or dropped the connection."""


class APIError(RagserveClientError):
    status_code: int | None

    def __init__(self, message: str, *, status_code: int | None, type: str = "error", code: str = "error",
                 param: str | None = None, details: list[dict[str, Any]] | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.type = type
        self.code = code
        self.param = param
        self.details = details
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f" (param {self.param})" if self.param else ""
        status = f"{self.status_code} " if self.status_code is not None else ""
        return f"{status}{self.code}: {self.message}{where}"


class InvalidRequest(APIError):
    pass


class PayloadTooLarge(InvalidRequest):
    pass


class Unauthorized(APIError):
    pass


class Forbidden(APIError):
    pass


class NotFound(APIError):
    pass


class Conflict(APIError):
    pass


class RateLimited(APIError):
    """ragserve's own slots toward a runner are full; ``retry_after`` says when to come back."""

    retry_after: float


class ServerError(APIError):
    pass


class Unavailable(ServerError):
    pass


class Timeout(ServerError):
    pass


BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 413: PayloadTooLarge,
    415: InvalidRequest, 422: InvalidRequest, 429: RateLimited, 503: Unavailable, 504: Timeout,
}
BY_CODE: dict[str, type[APIError]] = {
    "upstream_timeout": Timeout, "upstream_unavailable": Unavailable, "upstream_overloaded": Unavailable,
    "overloaded": RateLimited,
}
"""For errors that arrive inside a stream that had already started (no status of their own)."""


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def error_from_response(status: int, headers: Mapping[str, str], content: bytes) -> APIError:
    """The typed exception for an error answer, from its envelope (or its bare text when it has none)."""
    try:
        body = json.loads(content)
        envelope = body["error"]
        message, code = str(envelope["message"]), str(envelope.get("code") or "error")
    except (ValueError, KeyError, TypeError):
        envelope, message, code = {}, content.decode("utf-8", "replace")[:500] or f"HTTP {status}", f"http_{status}"
    cls = BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    retry_after = _retry_after(headers)
    if cls is RateLimited and retry_after is None:
        retry_after = 1.0
    return cls(message, status_code=status, type=str(envelope.get("type") or "error"), code=code,
               param=envelope.get("param"), details=envelope.get("details"), retry_after=retry_after)


def error_from_event(event: Mapping[str, Any]) -> APIError:
    """An ``{"error": {...}}`` event of a stream that had already started."""
    envelope = event.get("error") or {}
    if not isinstance(envelope, Mapping):
        envelope = {"message": str(envelope)}
    code = str(envelope.get("code") or "stream_error")
    cls = BY_CODE.get(code, APIError)
    return cls(str(envelope.get("message") or "the stream ended with an error"), status_code=None,
               type=str(envelope.get("type") or "error"), code=code, param=envelope.get("param"))
