"""Layering: every import points down a stated layer order, and nothing imports in a circle.

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
FRONT_ENDS = ("service/api/", "service/server.py", "service/docs/")


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
    modules = sorted((ROOT / "service" / "api" / "mcp").rglob("*.py"))
    assert modules  # the adapter is where this looks
    for path in modules:
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


def package_graph(package: Path, prefix: str) -> dict[str, set[str]]:
    """A package's modules -> the modules of it they import, ``__init__`` included: ``from package import x``
    points at the submodule ``x`` where there is one, else at ``__init__`` (imports inside functions too)."""
    submodules = {path.stem for path in package.glob("*.py")} - {"__init__"}
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == prefix:
                found.update(a.name if a.name in submodules else "__init__" for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(prefix + "."):
                found.add(node.module.removeprefix(prefix + ".").split(".")[0])  # type: ignore[union-attr]
            elif isinstance(node, ast.Import):
                found.update(a.name.removeprefix(prefix + ".").split(".")[0] for a in node.names
                             if a.name.startswith(prefix + "."))
        graph[path.stem] = found - {path.stem}
    return graph


def test_the_cli_modules_import_each_other_without_a_circle() -> None:
    """service/cli's __init__ assembles the parser from the command groups, so a group that imported the package
    back (for ``main`` or a helper) would make a circle; the helpers they share sit below them (settings.py,
    client.py's connection to the API), imports inside functions included."""
    graph = package_graph(ROOT / "service" / "cli", "service.cli")
    assert graph["__init__"] >= {"client", "operations", "serve", "transfer"}
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
    graph = package_graph(ROOT / "indexer" / "parsers", "indexer.parsers")
    assert graph["__init__"] >= {"csv", "pdf", "errors"}
    assert circles(graph) == []


LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("ground floor: imports nothing of ragserve", frozenset({
        "config", "errors", "clock", "profiles", "sparse", "client", "startup"})),
    ("edges: the processes and the network ragserve talks to", frozenset({
        "deadline", "security", "runners", "store", "upstream", "media"})),
    ("domain: the use cases", frozenset({
        "auth", "documents", "json_types", "observability", "transfer", "search", "quality", "context", "generation",
        "indexer", "evaluation"})),
    ("front ends: HTTP (REST and MCP), the server, the CLI, the demo, the generated docs", frozenset({
        "api", "server", "docs", "demo", "cli"})),
)
"""The layer order, from the ground floor up, by package (``service.<name>``, and ``indexer``): a package imports
packages of its own layer or below, never above. ``client`` (the SDK) is on the ground floor because it imports
nothing of the server (checked below); ``evaluation`` drives a running ragserve through it."""
UPWARD: dict[tuple[str, str], str] = {}
"""Imports allowed to point up a layer, with the reason for each: none is left."""


def package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] == "indexer":
        return "indexer"
    if parts[0] == "service" and len(parts) > 1:
        return parts[1]
    return None


def package_imports() -> dict[str, dict[str, set[str]]]:
    """package -> imported package -> the files that import it (every import, inside functions too)."""
    graph: dict[str, dict[str, set[str]]] = {}
    for top in ("service", "indexer"):
        for path in sorted((ROOT / top).rglob("*.py")):
            me = package_of(".".join(path.relative_to(ROOT).with_suffix("").parts))
            if me is None or me == "__init__":
                continue
            graph.setdefault(me, {})
            for module in imported_modules(path):
                other = package_of(module)
                if other is not None and other != me:
                    graph[me].setdefault(other, set()).add(path.relative_to(ROOT).as_posix())
    return graph


def upward_imports(graph: dict[str, dict[str, set[str]]],
                   layers: tuple[tuple[str, frozenset[str]], ...]) -> list[str]:
    level = {package: i for i, (_, packages) in enumerate(layers) for package in packages}
    return sorted(f"{a} -> {b} ({', '.join(sorted(files))})" for a, imports in graph.items()
                  for b, files in imports.items() if level[b] > level[a] and (a, b) not in UPWARD)


def test_every_package_has_a_layer() -> None:
    placed = [p for _, packages in LAYERS for p in packages]
    assert len(placed) == len(set(placed))
    assert set(package_imports()) == set(placed)


def test_every_import_points_down_the_layers() -> None:
    assert upward_imports(package_imports(), LAYERS) == []


def test_the_layer_check_sees_an_upward_import() -> None:
    graph = {"config": {"api": {"service/config/x.py"}}, "api": {"config": {"service/api/y.py"}}}
    assert upward_imports(graph, LAYERS) == ["config -> api (service/config/x.py)"]


def test_no_two_packages_import_each_other_in_a_circle() -> None:
    assert circles({a: set(imports) for a, imports in package_imports().items()}) == []


def module_imports() -> dict[str, set[str]]:
    """Every module of service/ and indexer/ -> the modules of them it imports (inside functions too). ``from
    package import name`` points at the submodule ``package.name`` where there is one, else at the package."""
    modules = {}
    for top in ("service", "indexer"):
        for path in (ROOT / top).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            modules[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                found.update(subs if len(subs) == len(node.names) else [node.module, *subs])
        graph[name] = found - {name}
    return graph


def test_no_two_modules_import_each_other_in_a_circle() -> None:
    """Between files, imports inside functions included: a circle hidden in a function breaks on the first
    reordering of start-up."""
    graph = module_imports()
    assert len(graph) > 200 and "service.config.settings" in graph["service.config"]
    assert strongly_connected(graph) == []


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` as its strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_circle_check_sees_a_circle_through_three_modules() -> None:
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


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
