"""Errors from a vLLM runner, translated from httpx and HTTP statuses (``raise ... from exc``).

Hierarchy::

    UpstreamError (502 bad_gateway)            the runner answered something we cannot use
    ├── UpstreamUnavailable (503, Retry-After)  connection refused/reset, 5xx after retries, runner known down
    ├── UpstreamTimeout (504)                   no answer within the per-call timeout
    ├── UpstreamOverloaded (503, Retry-After)   the runner answered 429, or our own slots are full
    └── UpstreamRejected (422)                  the runner refused the input (4xx), e.g. too long
"""

from __future__ import annotations

from service.errors import RagserveError


class UpstreamError(RagserveError):
    status_code = 502
    type = "upstream_error"
    code = "bad_upstream_response"

    def __init__(self, runner: str, message: str, *, code: str | None = None) -> None:
        super().__init__(f"{runner} runner: {message}", code=code)
        self.runner = runner


class UpstreamUnavailable(UpstreamError):
    status_code = 503
    code = "upstream_unavailable"

    def __init__(
        self, runner: str, message: str, *, code: str | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(runner, message, code=code)
        self.retry_after_s = retry_after_s

    @property
    def headers(self) -> dict[str, str]:
        if self.retry_after_s is None:
            return {}
        return {"Retry-After": str(max(1, round(self.retry_after_s)))}


class UpstreamTimeout(UpstreamError):
    status_code = 504
    code = "upstream_timeout"


class UpstreamOverloaded(UpstreamError):
    status_code = 503
    code = "upstream_overloaded"

    def __init__(self, runner: str, message: str, *, retry_after_s: float = 1.0) -> None:
        super().__init__(runner, message)
        self.retry_after_s = retry_after_s

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, round(self.retry_after_s)))}


class UpstreamRejected(UpstreamError):
    status_code = 422
    type = "invalid_request"
    code = "upstream_rejected_input"
