"""Field types shared by the request models, each constrained the way its handler needs.

Request models are strict: ``"5"`` and ``5.0`` are not the integer 5 and ``"true"`` is not a boolean,
exactly as the JSON Schema in the OpenAPI document says. Checks that a JSON Schema keyword states
(``pattern``) run as Python validators so that a refusal says what is wrong in words and carries its
own error code (:data:`ERROR_CODES`, used by ``service.api.errors`` instead of ``validation_error``).
Limits that come from settings (``top_k`` up to ``RAGSERVE_LIMITS__MAX_TOP_K`` ...) are checked by the
handlers and written into the document by ``service.api.openapi``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from service.documents.payload import (
    ID_PATTERN,
    MAX_METADATA_DEPTH,
    NON_BLANK_TEXT_PATTERN,
    TEXT_PATTERN,
    id_problem,
    metadata_problem,
    text_problem,
)
from service.json_types import Int64
from service.search.filters import FIELD_RE

ERROR_CODES = frozenset({"control_character", "empty_text", "empty_query", "invalid_metadata", "zero_vector",
                         "unsupported_language", "invalid_vector", "empty_input", "token_input", "document_not_text"})
"""Validation error types raised here; each is the error's ``code`` in the envelope."""


def refuse(code: str, message: str) -> PydanticCustomError:
    assert code in ERROR_CODES
    return PydanticCustomError(code, message)


class RequestModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _identifier(value: str) -> str:
    if (why := id_problem(value)) is not None:
        raise refuse("control_character", why)
    return value


def _text(value: str) -> str:
    if (why := text_problem(value)) is not None:
        raise refuse("control_character", why)
    return value


def _non_blank(code: str, what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        _text(value)
        if not value.strip():
            raise refuse(code, f"{what} is empty (only whitespace)")
        return value

    return check


def _metadata(value: dict[str, Any]) -> dict[str, Any]:
    if (why := metadata_problem(value)) is not None:
        raise refuse("invalid_metadata", why)
    return value


Identifier = Annotated[str, Field(min_length=1, max_length=256, json_schema_extra={"pattern": ID_PATTERN}),
                       AfterValidator(_identifier)]
"""A document id: no control characters."""
Text = Annotated[str, Field(json_schema_extra={"pattern": TEXT_PATTERN}), AfterValidator(_text)]
"""Free text: no control characters but whitespace."""
NonEmptyText = Annotated[str, Field(min_length=1, json_schema_extra={"pattern": TEXT_PATTERN}), AfterValidator(_text)]
"""Free text of at least one character. (A length on ``Text`` itself, ``Annotated[Text, Field(min_length=1)]``,
would run after its function validator as a generic check: "Value should have at least 1 item", and a union
member label with a function's address in it.)"""
DocumentText = Annotated[str, Field(min_length=1, json_schema_extra={"pattern": NON_BLANK_TEXT_PATTERN}),
                         AfterValidator(_non_blank("empty_text", "text"))]
QueryText = Annotated[str, Field(min_length=1, json_schema_extra={"pattern": NON_BLANK_TEXT_PATTERN}),
                      AfterValidator(_non_blank("empty_query", "query"))]
MetadataKey = Annotated[str, Field(min_length=1, max_length=256, json_schema_extra={"pattern": ID_PATTERN}),
                        AfterValidator(_identifier)]
Metadata = Annotated[
    dict[MetadataKey, Any],
    AfterValidator(_metadata),
    Field(description=f"A JSON object, nested at most {MAX_METADATA_DEPTH} levels, integers within 64 bits; no "
                      "control characters in keys, none but whitespace in strings."),
]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]

FilterField = Annotated[str, Field(pattern=FIELD_RE.pattern)]
FilterText = Annotated[StrictStr, Field(json_schema_extra={"pattern": TEXT_PATTERN}), AfterValidator(_text)]


class RangeCondition(RequestModel):
    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    gt: FiniteFloat | SkipJsonSchema[None] = None
    gte: FiniteFloat | SkipJsonSchema[None] = None
    lt: FiniteFloat | SkipJsonSchema[None] = None
    lte: FiniteFloat | SkipJsonSchema[None] = None

    @model_validator(mode="after")
    def _bounds(self) -> RangeCondition:
        if not self.model_fields_set:
            raise ValueError("a range needs at least one of gt, gte, lt, lte")
        if any(getattr(self, name) is None for name in self.model_fields_set):
            raise ValueError("range bounds must be numbers")
        return self


FilterCondition = (
    FilterText
    | Int64
    | StrictBool
    | Annotated[list[FilterText], Field(min_length=1)]
    | Annotated[list[Int64], Field(min_length=1)]
    | RangeCondition
)
FILTER_SYNTAX = ('Conditions, all required: {"year": 2020} (equal), {"tag": ["a", "b"]} (any of), '
                 '{"n": {"gte": 1, "lt": 5}} (range); "doc_id" is the document id, every other key a '
                 "metadata field (a.b for a nested one).")
"""The filter syntax in words, for the OpenAPI page and the MCP tool's schema alike."""
Filter = Annotated[dict[FilterField, FilterCondition], Field(description=FILTER_SYNTAX)]


def filter_spec(conditions: dict[str, Any] | None) -> dict[str, Any] | None:
    """A validated filter as the plain mapping ``service.search.filters.build_filter`` reads."""
    if conditions is None:
        return None
    return {k: v.model_dump(exclude_unset=True) if isinstance(v, RangeCondition) else v for k, v in conditions.items()}
