"""Every ``code`` the error envelope can carry, read from the source: the error classes' own codes, and
each ``code="..."`` given where an error is raised (an AST walk of ``service/`` and ``indexer/``).

What it finds, per code: the HTTP status and ``type`` (from the error class), and the modules that raise
it. It knows the shapes ragserve raises errors in: ``SomeError(..., code="x")`` for the classes of
:mod:`service.errors` and its subclasses, ``BodyError("x", ...)`` (a body that is not acceptable JSON),
``refuse("x", ...)`` (a request model's validator, 422), ``error_response(status, type, "x", ...)``, and a
runner client's ``unavailable_code="x"`` (its 503s); and the framework's own 404 and 405
(``service.api.errors.HTTP_CODES``).
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass, field
from pathlib import Path

from service.docs.markdown import REPO_ROOT
from service.errors import RagserveError

ERROR_MODULES = ("service.errors", "service.upstream.errors", "service.store.errors", "service.media.errors",
                 "service.security.errors", "service.transfer.errors")
SCANNED = ("service", "indexer")
SKIPPED = ("service/client", "service/docs")
"""The Python client (it maps codes, it raises none) and this package."""


@dataclass
class ErrorCode:
    status: int
    type: str
    code: str
    modules: set[str] = field(default_factory=set)


def error_classes() -> dict[str, type[RagserveError]]:
    for module in ERROR_MODULES:
        importlib.import_module(module)
    found: dict[str, type[RagserveError]] = {}
    stack: list[type[RagserveError]] = [RagserveError]
    while stack:
        cls = stack.pop()
        found[cls.__name__] = cls
        stack.extend(cls.__subclasses__())
    return found


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _text(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _int(node: ast.expr | None) -> int | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, int) else None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _arg(call: ast.Call, index: int) -> ast.expr | None:
    return call.args[index] if len(call.args) > index else None


def _codes_in(call: ast.Call, classes: dict[str, type[RagserveError]]) -> list[tuple[int, str, str]]:
    """(status, type, code) of the errors this call raises or answers with."""
    name = _name(call.func)
    if name in classes:
        cls = classes[name]
        given = _keyword(call, "code")
        code = _text(given) if given is not None else cls.code
        return [(cls.status_code, cls.type, code)] if code else []
    if name == "BodyError" and (code := _text(_arg(call, 0))):
        return [(_int(_keyword(call, "status_code")) or 400, "invalid_request", code)]
    if name == "refuse" and (code := _text(_arg(call, 0))):
        return [(422, "invalid_request", code)]
    if name == "error_response":
        status, type_, code = _int(_arg(call, 0)), _text(_arg(call, 1)), _text(_arg(call, 2))
        return [(status, type_, code)] if status and type_ and code else []
    unavailable = _text(_keyword(call, "unavailable_code"))
    if unavailable:
        cls = classes["UpstreamUnavailable"]
        return [(cls.status_code, cls.type, unavailable)]
    return []


def _sources(root: Path) -> list[Path]:
    files = [p for top in SCANNED for p in sorted((root / top).rglob("*.py"))]
    return [p for p in files if not any(p.relative_to(root).as_posix().startswith(s + "/") for s in SKIPPED)]


def catalogue(root: Path = REPO_ROOT) -> list[ErrorCode]:
    """Every (status, code) pair raised anywhere, sorted by status then code."""
    from service.api.errors import HTTP_CODES, STATUS_TYPES

    classes = error_classes()
    found: dict[tuple[int, str], ErrorCode] = {
        (status, code): ErrorCode(status, STATUS_TYPES[status], code, {"service/api/errors.py"})
        for status, code in HTTP_CODES.items()
    }
    for path in _sources(root):
        module = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=module)):
            if isinstance(node, ast.Call):
                for status, type_, code in _codes_in(node, classes):
                    entry = found.setdefault((status, code), ErrorCode(status, type_, code))
                    entry.modules.add(module)
    return sorted(found.values(), key=lambda e: (e.status, e.code))
