"""JSON integers as JSON Schema means them, for every model read from JSON: the API's requests and the
ingest spec the job queue stores (:mod:`indexer.spec`), which must not depend on the API's schemas.

``5`` and ``5.0`` are the integer 5 (a number with no fraction); ``5.5``, ``"5"`` and ``true`` are not (the
models are strict). ``1e300`` is an integer too: the field's bound (a limit, :data:`Int64`) refuses it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from service.documents.payload import INT64_MAX, INT64_MIN


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_integral)]
"""An integer as JSON Schema means it: 5 or 5.0, never 5.5, "5" or true."""
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX), BeforeValidator(_integral)]
"""A JSON integer within 64 bits (what the store's payload indexes hold)."""
