from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    type: str = Field(description="Error class, e.g. invalid_request, not_found, upstream_error.")
    code: str = Field(description="Machine-readable reason, e.g. collection_not_found.")
    message: str = Field(description="Human-readable explanation.")
    param: str | None = Field(None, description="The request field at fault, when there is one.")
    details: list[dict[str, Any]] | None = Field(None, description="Validation errors, field by field.")


class ErrorResponse(BaseModel):
    """The one envelope every failure is returned in."""

    error: ErrorBody


STATUS_TEXT = {
    400: "Bad request: invalid JSON (invalid_json, invalid_utf8, invalid_unicode, json_too_deep) or a feature "
         "this deployment lacks",
    401: "Missing or invalid API key",
    403: "Not allowed: the key lacks the route's scope or the collection (insufficient_scope, "
         "collection_not_allowed), or a server path outside the allowed roots",
    404: "Not found",
    409: "Conflict: the collection exists, or its dimensions do not fit the embedding model",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Invalid input",
    429: "Overloaded; retry after Retry-After seconds",
    502: "A runner answered something ragserve cannot use",
    503: "A runner or the store is unavailable",
    504: "A runner or the store timed out",
    507: "The data disk is full; nothing was written",
}
COMMON_ERRORS = (400, 401, 403, 413, 422, 429, 503, 504)
"""What any authenticated route may answer: body checks, the key and its scopes, the body-size limit,
validation, and the bounded slots toward runners and the store."""


def error_responses(*extra: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for a router: the common errors plus ``extra``, each in the envelope."""
    return {
        status: {"model": ErrorResponse, "description": STATUS_TEXT[status]}
        for status in sorted({*COMMON_ERRORS, *extra})
    }


ERROR_RESPONSES = error_responses(404, 409, 502)
