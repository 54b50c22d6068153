"""The steps a sans-I/O operation yields (:mod:`service.client.protocol`): plain data, importing nothing of the
client, so every client module can depend on it and none on another in a circle."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One HTTP exchange, relative to the client's base URL."""

    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    files: list[tuple[str, tuple[str, bytes, str]]] | None = None
    data: dict[str, str] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Sleep:
    seconds: float


Step = Call | Sleep
Operation = Generator[Step, "httpx.Response | None", T]
"""Yields steps, is sent each Call's response (None after a Sleep), returns the result."""
