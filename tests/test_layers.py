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
import sys
from pathlib import Path

import pytest

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


CLIENT = "service.client"
CLIENT_THIRD_PARTY = {"httpx", "pydantic", "langchain_core", "llama_index"}
"""All the client may import besides itself and the standard library: its distribution (``ragserve-client``,
service/client/pyproject.toml) installs httpx and pydantic, and the adapters' extras their frameworks."""


def client_imports(path: Path) -> set[str]:
    """Every module a service/client module imports, relative imports resolved (``from .sync import Client``
    is ``service.client.sync``; ``from .. import x`` is ``service``, past the package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.ImportFrom):
            base = CLIENT.split(".")[: max(len(CLIENT.split(".")) - (node.level - 1), 0)]
            found.add(".".join([*base, *([node.module] if node.module else [])]) or ".")
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


def test_the_mcp_adapter_imports_no_route_module() -> None:
    """A route only translates: MCP calls the use cases the routes call (``service.search.retrieval``), never a
    route module, so every way in meets one set of rules without one front end borrowing another's."""
    offenders = {}
    for path in sorted((ROOT / "service" / "mcp").rglob("*.py")):
        routes = sorted(m for m in imported_modules(path) if m.startswith("service.api.routes"))
        if routes:
            offenders[path.relative_to(ROOT).as_posix()] = routes
    assert offenders == {}


def test_the_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from service.api.schemas.chat import ChatCompletionRequest\n")
    assert imported_modules(module) == {"service.api.schemas.chat"}


def test_the_client_modules_import_each_other_without_a_circle() -> None:
    """service/client imports in one direction (steps <- streaming <- protocol <- api <- sync, aio; the adapters
    on top), type-only imports included: a circle, even under TYPE_CHECKING, breaks on the first reordering."""
    package = ROOT / "service" / "client"
    graph = {path.stem: {m.rsplit(".", 1)[1] for m in client_imports(path) if m.startswith(CLIENT + ".")}
             for path in package.glob("*.py") if path.stem != "__init__"}
    assert circles(graph) == []


def test_the_runner_modules_import_each_other_without_a_circle() -> None:
    """service/runners in one direction too: the supervisor wraps the launcher's ``running`` (``supervised``),
    and the launcher knows nothing of it (it had imported the supervisor inside ``running``)."""
    runners = "service.runners."
    graph = {path.stem: {m.removeprefix(runners).split(".")[0] for m in imported_modules(path)
                         if m.startswith(runners)}
             for path in (ROOT / "service" / "runners").glob("*.py") if path.stem != "__init__"}
    assert graph["supervisor"] >= {"launcher"}
    assert circles(graph) == []


def test_the_store_modules_import_each_other_without_a_circle() -> None:
    """service/store in one direction, imports inside functions included: the pipe's framing knows neither side,
    the proxy (the API's side) and the child (the store's side) each import it, and neither imports the other."""
    store = "service.store."
    graph = {path.stem: {m.removeprefix(store).split(".")[0] for m in imported_modules(path)
                         if m.startswith(store)} - {path.stem}
             for path in (ROOT / "service" / "store").glob("*.py") if path.stem != "__init__"}
    assert graph["proxy"] >= {"framing"} and graph["child"] >= {"framing"}
    assert not graph["framing"] & {"proxy", "child", "owner"}
    assert "child" not in graph["proxy"] and "proxy" not in graph["child"]
    assert "edge" not in graph["proxy"]  # the proxy needs the disk check only, not the engine's store
    assert circles(graph) == []


def test_the_parsers_import_their_error_from_below_not_from_their_package() -> None:
    """indexer/parsers/__init__.py imports every parser; a parser that imported ``ParseError`` back from the
    package (inside a function, to dodge the circle at import time) made one. The error has its own module."""
    package, prefix = ROOT / "indexer" / "parsers", "indexer.parsers"
    submodules = {path.stem for path in package.glob("*.py")} - {"__init__"}
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == prefix:
                found.update(a.name if a.name in submodules else "__init__" for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(prefix + "."):
                found.add(node.module.removeprefix(prefix + ".").split(".")[0])  # type: ignore[union-attr]
        graph[path.stem] = found - {path.stem}
    assert graph["__init__"] >= {"csv", "pdf", "errors"}
    assert circles(graph) == []


def circles(graph: dict[str, set[str]]) -> list[str]:
    """Every import circle of ``graph`` (module -> the modules it imports), each as ``a -> b -> a``."""
    found = []
    for start in sorted(graph):
        stack = [(start, [start])]
        while stack:
            module, path = stack.pop()
            for nxt in sorted(graph.get(module, ())):
                if nxt == start:
                    found.append(" -> ".join([*path, nxt]))
                elif nxt not in path:
                    stack.append((nxt, [*path, nxt]))
    return found


def client_outside_imports(path: Path) -> list[str]:
    outside = []
    for module in sorted(client_imports(path)):
        top = module.split(".")[0]
        if module == CLIENT or module.startswith(CLIENT + "."):
            continue
        if top in CLIENT_THIRD_PARTY or (top in sys.stdlib_module_names and top not in ("service", "indexer")):
            continue
        outside.append(module)
    return outside


def test_the_client_imports_nothing_of_the_server() -> None:
    """service/client is also the ``ragserve_client`` distribution, built from these very files: an import of
    ``service.*`` or ``indexer.*`` (absolute, or relative past the package) would work in the repository and
    fail in a chat app that installed only the client."""
    offenders = {path.name: client_outside_imports(path) for path in sorted((ROOT / "service" / "client").glob("*.py"))}
    assert {name: found for name, found in offenders.items() if found} == {}


@pytest.mark.parametrize(("source", "found"), [
    ("from indexer.spec import IngestOptions\n", ["indexer.spec"]),
    ("def f():\n    from service.documents.payload import ID_PATTERN\n", ["service.documents.payload"]),
    ("from ..documents import payload\n", ["service.documents"]),
    ("from ... import indexer\n", ["."]),
    ("from .sync import Client\nimport httpx, json\nfrom pydantic import BaseModel\n", []),
    ("import numpy\n", ["numpy"]),
])
def test_the_client_check_sees_every_way_out(tmp_path: Path, source: str, found: list[str]) -> None:
    module = tmp_path / "m.py"
    module.write_text(source)
    assert client_outside_imports(module) == found
