"""Request bodies as JSON, read one way for every route, each refusal a 400 with its own code.

Python's ``json.loads`` is more lenient than JSON and than what the store can hold, so a body is checked
before any model sees it:

- ``invalid_utf8``: the bytes are not UTF-8 (JSON over a network is UTF-8, RFC 8259 §8.1);
- ``invalid_json``: not JSON, or ``NaN`` / ``Infinity`` literals (Python accepts them; JSON does not);
- ``json_too_deep``: arrays and objects nested deeper than :data:`MAX_DEPTH` (Python's parser would end
  in a ``RecursionError``, and a payload past the engine's own limit would make a collection unreadable);
- ``invalid_unicode``: a string or key holding a lone surrogate escape (``"\\ud800"``): valid JSON syntax,
  but no Unicode text, so it cannot be encoded as UTF-8 for the runners or the store.

FastAPI reads bodies through ``Request.json()``; :class:`JsonRoute` hands it a request whose ``json()``
is :func:`parse_json`. Routes that read their body themselves (ingest, multipart fields) call it directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from service.api.dependency_plan import Plan, make_plan, serve

MAX_DEPTH = 64
"""Nesting depth of a request body. Metadata has its own, lower limit (service.documents.payload)."""


class BodyError(HTTPException):
    """A body that is not acceptable JSON. An ``HTTPException`` so that FastAPI's body reader passes it
    on unchanged; ``service.api.errors`` renders it in the envelope with its ``code``."""

    def __init__(self, code: str, message: str, status_code: int = 400) -> None:
        super().__init__(status_code=status_code, detail=message)
        self.code = code


def _refuse_constant(name: str) -> Any:
    raise BodyError("invalid_json", f"the request body is not valid JSON: {name} is not a JSON number")


def parse_json(body: bytes | str, *, max_depth: int = MAX_DEPTH, what: str = "the request body") -> Any:
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else body
    except UnicodeDecodeError as exc:
        raise BodyError("invalid_utf8", f"{what} is not valid UTF-8 (byte {exc.start})") from exc
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError as exc:
        raise BodyError("json_too_deep", f"{what} is nested deeper than {max_depth} levels") from exc
    except ValueError as exc:  # JSONDecodeError
        raise BodyError("invalid_json", f"{what} is not valid JSON ({exc})") from exc
    check_tree(value, max_depth=max_depth, what=what)
    return value


def check_tree(value: Any, *, max_depth: int, what: str) -> None:
    """Depth and Unicode of a decoded JSON value, walked with an explicit stack (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_text(node, what)
        elif isinstance(node, (dict, list)):
            if depth > max_depth:
                raise BodyError("json_too_deep", f"{what} is nested deeper than {max_depth} levels")
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, child in items:
                if isinstance(key, str):
                    _check_text(key, what)
                if isinstance(child, (str, dict, list)):
                    stack.append((child, depth + 1))


def _check_text(text: str, what: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BodyError(
            "invalid_unicode", f"{what} holds a lone surrogate escape (\\u{ord(text[exc.start]):04x}), which is "
            "not a Unicode character",
        ) from exc


class JsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class JsonRoute(APIRoute):
    """The route class of every router: JSON bodies are read by :func:`parse_json`, and a route's
    dependencies are solved by its plan where it has one (:mod:`service.api.dependency_plan`; ``plan`` None:
    FastAPI's handler serves every request)."""

    plan: Plan | None = None

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        self.plan = make_plan(self)

        async def route_handler(request: Request) -> Response:
            json_request = JsonRequest(request.scope, request.receive)
            plan, overrides = self.plan, self.dependency_overrides_provider
            if (plan is None or (overrides is not None and overrides.dependency_overrides)
                    or (self.body_field is not None and not _plain_json(request))):
                return await handler(json_request)
            return await serve(self, plan, json_request)

        return route_handler


def _plain_json(request: Request) -> bool:
    """Whether the request's content type is exactly ``application/json`` (any other, FastAPI's rules decide)."""
    content_type = request.headers.get("content-type")
    return content_type is not None and content_type.lower() == "application/json"
