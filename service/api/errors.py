"""The one place exceptions become HTTP responses, all in the :class:`ErrorResponse` envelope."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.api.json_body import BodyError
from service.api.schemas.common import ERROR_CODES
from service.api.schemas.errors import ErrorBody, ErrorResponse
from service.errors import InsufficientStorage, RagserveError, is_disk_full
from service.upstream.errors import UpstreamError

log = logging.getLogger("ragserve.api")

STATUS_TYPES = {400: "invalid_request", 401: "authentication_error", 404: "not_found", 405: "invalid_request",
                413: "invalid_request", 415: "invalid_request", 422: "invalid_request", 429: "overloaded",
                507: "insufficient_storage"}
HTTP_CODES = {404: "route_not_found", 405: "method_not_allowed"}
"""The envelope's code for the framework's own refusals: a path or a method no route has."""


def error_response(
    status: int, type_: str, code: str, message: str, *, param: str | None = None,
    details: list[dict[str, object]] | None = None, headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = ErrorResponse(error=ErrorBody(type=type_, code=code, message=message, param=param, details=details))
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


async def _ragserve_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RagserveError)
    if isinstance(exc, UpstreamError):
        metrics = getattr(request.app.state, "metrics", None)
        if metrics is not None:
            metrics.upstream_errors.labels(exc.runner, exc.code).inc()
        log.warning("upstream error: %s", exc.message)
    return error_response(exc.status_code, exc.type, exc.code, exc.message, param=exc.param, headers=exc.headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        return error_response(400, "invalid_request", "invalid_json", "the request body is not valid JSON")
    details: list[dict[str, object]] = []
    for e in errors:
        detail = {"loc": [str(p) for p in e.get("loc", ()) if not _validator_label(str(p))],
                  "msg": _message(e), "type": str(e.get("type"))}
        if detail not in details:  # a union's members, once their labels are gone, often say the same
            details.append(detail)
    first = _telling(details)
    loc = [p for p in first["loc"] if p != "body"]  # type: ignore[attr-defined]
    param = ".".join(loc) or None
    message = f"{param}: {first['msg']}" if param else str(first["msg"])
    return error_response(422, "invalid_request", _validation_code(loc, str(first["type"])), message, param=param,
                          details=details)


def _telling(details: list[dict[str, object]]) -> dict[str, object]:
    """The error the envelope's message is about: the first, unless it only says the value is not the first
    member of a union (``input: Input should be a valid string`` for a list of texts). Then another member's
    error about the value itself (not its type) is preferred, else a type error that went deeper into it."""
    if not details:
        return {"loc": [], "msg": "invalid request", "type": ""}
    first = details[0]
    if not str(first["type"]).endswith("_type"):
        return first
    at: list[str] = first["loc"]  # type: ignore[assignment]
    within = [d for d in details if d["loc"][: len(at)] == at]  # type: ignore[index]
    about_value = [d for d in within if not str(d["type"]).endswith("_type")]
    deeper = [d for d in within if len(d["loc"]) > len(at)]  # type: ignore[arg-type]
    chosen = about_value or deeper
    return max(chosen, key=lambda d: len(d["loc"])) if chosen else first  # type: ignore[arg-type]


def _message(error: Any) -> str:
    """Pydantic's message without its own prefix (``Value error, ...``): the validator's words."""
    message = str(error.get("msg"))
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message


def _validator_label(part: str) -> bool:
    """Pydantic puts the union member it tried into an error's location (``function-after[_text(), str]``,
    ``list[constrained-str]``, ``RangeCondition``), some with a function's repr and address in them; the field
    path alone is the ``param`` and the ``details``' ``loc``."""
    return "[" in part or part in UNION_LABELS


UNION_LABELS = frozenset({"str", "int", "bool", "float", "list", "dict", "RangeCondition", "RelevantSpans",
                          "SparseOptions", "TextPart", "ImagePart", "constrained-str", "constrained-int"})


def _validation_code(loc: list[str], type_: str) -> str:
    """The envelope's code for a validation error: ragserve's own where a validator named one, the filter
    language's for anything under ``filter``, else ``validation_error``."""
    if "filter" in loc[:2]:  # filter, ragserve.filter, request.filter (the upload form field)
        return "invalid_filter"
    if type_ in ERROR_CODES:
        return type_
    return "validation_error"


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if isinstance(exc, BodyError):
        return error_response(exc.status_code, "invalid_request", exc.code, str(exc.detail))
    code = HTTP_CODES.get(exc.status_code, "http_error")
    return error_response(
        exc.status_code, STATUS_TYPES.get(exc.status_code, "error"), code, str(exc.detail),
        headers=dict(exc.headers or {}),
    )


async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal_error", "internal_error", "internal server error")


async def _storage_error(request: Request, exc: Exception) -> JSONResponse:
    """An OS or SQLite error: 507 when the data disk is full (an upload, the job queue), else a 500."""
    if not is_disk_full(exc):
        return await _unhandled(request, exc)
    log.error("%s %s: the data disk is full (%s)", request.method, request.url.path, exc)
    full = InsufficientStorage("the data disk is full: nothing was written; searches go on, and writes work again "
                               "once space is freed")
    return error_response(full.status_code, full.type, full.code, full.message)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RagserveError, _ragserve_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(OSError, _storage_error)
    app.add_exception_handler(sqlite3.OperationalError, _storage_error)
    app.add_exception_handler(Exception, _unhandled)
