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


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in {
        400: "Bad request",
        401: "Missing or invalid API key",
        404: "Not found",
        413: "Payload too large",
        422: "Invalid input",
        429: "Overloaded; retry after Retry-After seconds",
        503: "A runner or the store is unavailable",
        504: "A runner or the store timed out",
    }.items()
}
