"""The client's ingest options (service/client/options.py, its own view of the wire: the client imports nothing of
the server) hold the server's fields and defaults, and accept and refuse options as the server does, but for
the rules on metadata values, which only the server checks."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from indexer.spec import IngestOptions as ServerOptions
from service.client import IngestOptions


def test_fields_and_defaults_are_the_servers() -> None:
    client = {name: field.get_default(call_default_factory=True) for name, field in IngestOptions.model_fields.items()}
    server = {name: field.get_default(call_default_factory=True) for name, field in ServerOptions.model_fields.items()}
    assert client == server


def _accepts(model: type[Any], given: dict[str, Any]) -> bool:
    try:
        model.model_validate(given)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("given", [
    {}, {"prune": True}, {"chunking": "tokens", "chunk_tokens": 8, "chunk_overlap": 0}, {"source_name": "s" * 1024},
    {"metadata": {"tag": "x", "year": 2024}},
    {"prnue": True}, {"prune": "true"}, {"chunking": "words"}, {"chunk_tokens": 7}, {"chunk_tokens": "64"},
    {"chunk_overlap": -1}, {"source_name": "s" * 1025}, {"metadata": ["tag"]}, {"chunk_tokens": 64.0},
    {"chunk_tokens": 64.5}, {"chunk_overlap": True},
])
def test_accepts_and_refuses_as_the_server(given: dict[str, Any]) -> None:
    assert _accepts(IngestOptions, given) == _accepts(ServerOptions, given)


def test_a_checked_option_goes_on_the_wire_as_given() -> None:
    given = {"prune": True, "chunking": "tokens", "chunk_tokens": 64, "metadata": {"tag": "x"}}
    assert IngestOptions.model_validate(given).model_dump(exclude_none=True) == \
        ServerOptions.model_validate(given).model_dump(exclude_none=True)
