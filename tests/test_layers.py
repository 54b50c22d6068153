"""Layering: the domain never imports the HTTP layer.

``service.api`` (routes, wire schemas, the app's object graph) sits on top of the domain packages
(search, generation, documents, store, clients, ...) and of the indexer. The worker must be buildable
without the API (``indexer.services``), and domain code takes domain objects, not request models
(``service.generation.request`` is what the chat engine reads; the wire schema converts into it). Only the
front ends over the API may import it: the server entry point, the generated docs and the MCP adapter.
Every import is checked, module-level and inside functions alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRONT_ENDS = ("service/api/", "service/server.py", "service/docs/", "service/mcp/")


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_no_domain_module_imports_the_api() -> None:
    offenders = {}
    for package in ("service", "indexer"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(FRONT_ENDS):
                continue
            api = sorted(m for m in imported_modules(path) if m == "service.api" or m.startswith("service.api."))
            if api:
                offenders[rel] = api
    assert offenders == {}


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from service.api.schemas.chat import ChatCompletionRequest\n")
    assert imported_modules(module) == {"service.api.schemas.chat"}
