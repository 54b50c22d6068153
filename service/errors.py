"""ragserve's typed errors. Every failure a client can see is one of these, mapped to HTTP in one place
(``service.api.errors``) and rendered in one envelope::

    {"error": {"type": "not_found", "code": "collection_not_found", "message": "...", "param": null}}

Hierarchy::

    RagserveError
    ├── BadRequest (400)             ── InvalidInput (422), PayloadTooLarge (413)
    ├── Unauthorized (401)
    ├── NotFound (404)
    ├── Conflict (409)
    ├── Overloaded (429, Retry-After)
    ├── InsufficientStorage (507)    the data disk is full (uploads, the job queue); the store has StoreFull
    └── UpstreamError (502)          see ``service.upstream.errors``: unavailable 503, timeout 504 ...
"""

from __future__ import annotations

import errno
import sqlite3


class RagserveError(Exception):
    status_code = 500
    type = "internal_error"
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.param = param

    @property
    def headers(self) -> dict[str, str]:
        return {}


class BadRequest(RagserveError):
    status_code = 400
    type = "invalid_request"
    code = "bad_request"


class InvalidInput(BadRequest):
    status_code = 422
    code = "invalid_input"


class PayloadTooLarge(BadRequest):
    status_code = 413
    code = "payload_too_large"


class Unauthorized(RagserveError):
    status_code = 401
    type = "authentication_error"
    code = "invalid_api_key"


class NotFound(RagserveError):
    status_code = 404
    type = "not_found"
    code = "not_found"


class Conflict(RagserveError):
    status_code = 409
    type = "conflict"
    code = "conflict"


class Overloaded(RagserveError):
    status_code = 429
    type = "overloaded"
    code = "overloaded"

    def __init__(self, message: str, *, retry_after_s: float = 1.0, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, round(self.retry_after_s)))}


class Forbidden(RagserveError):
    status_code = 403
    type = "permission_error"
    code = "forbidden"


class InsufficientStorage(RagserveError):
    status_code = 507
    type = "insufficient_storage"
    code = "disk_full"


def is_disk_full(exc: BaseException) -> bool:
    """A write that failed because the disk is full: ``ENOSPC``/``EDQUOT``, or SQLite's ``SQLITE_FULL``."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc)
