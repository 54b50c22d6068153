"""``docs/api.md``: the API reference, written from the OpenAPI document a default deployment serves.

``python -m service.docs.api_reference`` rewrites it; ``--check`` only says whether it is stale (and
``tests/service/docs/test_api_reference.py`` fails when it is). Per route: method, path, the scopes of
:data:`service.auth.policy.ROUTE_SCOPES`, summary, parameters, the request body's fields (type, limits,
default, description) and the responses; then the schemas the routes refer to, and every error code the
source raises (:mod:`service.docs.error_codes`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from service.api.app import create_app
from service.auth.policy import ANY, scopes_for
from service.config import Settings
from service.docs import json_schema as js
from service.docs.error_codes import catalogue
from service.docs.markdown import REPO_ROOT, check_or_write, code, slug, table

OUTPUT = REPO_ROOT / "docs" / "api.md"
COMMAND = "python -m service.docs.api_reference"
DOC_KEY = "docs-generator-key-0123456789"
METHODS = ("get", "post", "put", "patch", "delete")
FRAMEWORK_PATHS = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
Schema = dict[str, Any]


class DefaultSettings(Settings):
    """The settings' defaults alone: neither the environment nor a ``.env`` file of whoever runs the
    generator reaches the document (nor is checked: this is no deployment)."""

    def __init__(self, **values: Any) -> None:
        BaseSettings.__init__(self, **values)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        **_: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def build_app(**settings: Any) -> FastAPI:
    return create_app(DefaultSettings(api_keys=[DOC_KEY], **settings))


def _scope_text(method: str, route_path: str, secured: bool) -> str:
    if not secured:
        return "none (no key)"
    scopes = scopes_for(method, route_path)
    if scopes == ANY:
        return "any key"
    return " or ".join(code(s) for s in sorted(scopes)) if scopes else "refused (not in the policy table)"


def _route_paths(app: FastAPI) -> dict[str, str]:
    """OpenAPI path (``{doc_id}``) -> the route's own template (``{doc_id:path}``), as the policy names it."""
    return {r.path_format: r.path for r in app.routes if isinstance(r, APIRoute)}


SOURCES = {"ingest": {"allowed_roots": ["/srv/docs"]}, "fetch": {"allowed_domains": ["docs.example.com"]}}
"""A deployment that allows both JSON ingest sources, for their schemas."""
SOURCE_SCHEMAS = ("IngestRequest", "PathSource", "UrlSource")


class Reference:
    def __init__(self, doc: Schema, app: FastAPI, minilm: Schema, sources: Schema) -> None:
        self.doc, self.app, self.minilm = doc, app, minilm
        self.schemas: dict[str, Schema] = dict(doc["components"]["schemas"])
        self.json_ingest = "IngestRequest" in self.schemas
        if not self.json_ingest:  # offered only where a server path or URLs are allowed
            self.schemas.update({n: sources["components"]["schemas"][n] for n in SOURCE_SCHEMAS})
        self.routes = _route_paths(app)
        self.operations = [(path, method, op) for path, ops in doc["paths"].items()
                           for method, op in ops.items() if method in METHODS]
        self.inline = self._inline_bodies()
        self.listed = self._listed_schemas()
        self.shared_errors = self._error_statuses()

    def link(self, name: str) -> str:
        if name in self.listed:
            return f"[{name}](#{slug(name)})"
        return code(name)

    def _body_refs(self, op: Schema) -> list[str]:
        content = (op.get("requestBody") or {}).get("content", {})
        return [n for media in content.values() if (n := js.ref_name(media.get("schema", {}))) is not None]

    def _inline_bodies(self) -> set[str]:
        """Request bodies shown field by field under their route (and nowhere else unless referred to)."""
        return {name for _, _, op in self.operations for name in self._body_refs(op)}

    def _listed_schemas(self) -> list[str]:
        """Schemas with a section of their own: everything a route refers to, bodies aside, transitively."""
        roots: set[str] = set()
        for _, _, op in self.operations:
            roots |= js.refs(op.get("responses", {})) | js.refs(op.get("parameters", []))
            for name in self._body_refs(op):
                roots |= js.refs(self.schemas[name])
            content = (op.get("requestBody") or {}).get("content", {})
            roots |= {n for media in content.values() if js.ref_name(media.get("schema", {})) is None
                      for n in js.refs(media.get("schema", {}))}
        roots |= js.refs(self.schemas["IngestRequest"]) | {"IngestRequest"}
        seen: set[str] = set()
        stack = sorted(roots)
        while stack:
            name = stack.pop()
            if name in seen or name not in self.schemas:
                continue
            seen.add(name)
            stack.extend(js.refs(self.schemas[name]))
        return sorted(seen)

    def fields(self, schema: Schema) -> list[str]:
        required = set(schema.get("required", []))
        rows = [
            (code(name), js.type_text(prop, self.link), "yes" if name in required else "", js.default_text(prop),
             js.limits_text(prop), js.description(prop))
            for name, prop in schema.get("properties", {}).items()
        ]
        if not rows:
            return [f"Type: {js.type_text(schema, self.link)}."]
        lines = table(("field", "type", "required", "default", "limits", "description"), rows)
        if schema.get("additionalProperties") is False:
            lines.append("")
            lines.append("Other fields are refused (422).")
        return lines

    def render(self) -> str:
        out = [
            "# API reference",
            "",
            f"<!-- Generated by `{COMMAND}` from the OpenAPI document; do not edit by hand. -->",
            "",
            f"{self.doc['info']['title']} {self.doc['info']['version']}: {self.doc['info'].get('description', '')}",
            "",
            "This is the document a deployment with **default settings** serves at `GET /openapi.json` (the "
            "qwen3 profile with its generator; limits from `RAGSERVE_LIMITS__*` at their defaults, "
            "[configuration.md](configuration.md)). Every deployment serves its own: limits follow its "
            "settings, and what it lacks is left out:",
            "",
            *self._differences(),
            "",
            "Every route but `/health` (and the playground's page) needs `Authorization: Bearer <key>`; a key "
            "holds scopes (`read`, `write`, `admin`), and the *scope* below is what a route asks for (any one "
            "suffices). Every failure is one envelope, "
            "`{\"error\": {\"type\", \"code\", \"message\", \"param\", \"details\"}}` "
            f"({self.link('ErrorResponse')}); its codes are [listed at the end](#error-codes).",
            "",
            "## Routes",
            "",
            *table(("method", "path", "scope", "summary"), [
                (method.upper(), f"[{code(path)}](#{slug(self._heading(path, method))})",
                 self._scope(path, method, op), op.get("summary", "")) for path, method, op in self.operations
            ]),
            "",
            *self._outside(),
            "",
            "## Error statuses",
            "",
            "Each route lists the error statuses it may answer; in the envelope, they mean:",
            "",
            *table(("status", "meaning"), self.shared_errors.items()),
            "",
            "A 429 or 503 carries `Retry-After` (seconds) where waiting helps.",
        ]
        for path, method, op in self.operations:
            out += ["", *self._operation(path, method, op)]
        out += ["", "## Schemas", ""]
        for name in self.listed:
            out += self._schema_section(name)
        out += ["", "## Error codes", "",
                "Every `code` the envelope carries, with its status and `type`, and where it is raised "
                "(read from the source by `service/docs/error_codes.py`).", "",
                *table(("status", "type", "code", "raised in"), [
                    (e.status, code(e.type), code(e.code), ", ".join(code(m) for m in sorted(e.modules)))
                    for e in catalogue()
                ]), ""]
        return "\n".join(out)

    def _differences(self) -> list[str]:
        left_out = [p for p in self.doc["paths"] if p not in self.minilm["paths"]]
        lines = [f"- the **minilm** profile (no reranker, no generator) leaves out "
                 f"{', '.join(code(p) for p in left_out)}, reranking in `/v1/search` and search by image;",
                 "- `RAGSERVE_GENERATION__ENABLED=false` leaves out the generator's routes and search by image;"]
        if not self.json_ingest:
            lines.append(f"- the ingest route takes a JSON body ({self.link('IngestRequest')}) only where "
                         "`RAGSERVE_INGEST__ALLOWED_ROOTS` (a server path) or `RAGSERVE_FETCH__ALLOWED_DOMAINS` "
                         "(URLs) allows a source; uploads (multipart) always work. Its schemas below are those of "
                         f"a deployment with {_settings_text(SOURCES)}.")
        return lines

    def _outside(self) -> list[str]:
        """Routes the document leaves out (the MCP endpoint, the playground), each said by its module."""
        rows: dict[str, list[Any]] = {}
        for route in self.app.routes:
            path = getattr(route, "path", "")
            if path in FRAMEWORK_PATHS or (isinstance(route, APIRoute) and route.include_in_schema):
                continue
            methods = sorted(m for m in (getattr(route, "methods", None) or ()) if m != "HEAD")
            endpoint = getattr(route, "endpoint", None)
            module = getattr(endpoint, "__module__", None) or type(endpoint).__module__
            what = (sys.modules[module].__doc__ or "").strip().split("\n\n")[0].replace("``", "`")
            row = rows.setdefault(module, [set(), [], _scope_text(methods[0], path, path.startswith("/mcp")), what])
            row[0].update(methods)
            row[1].append(code(path))
        if not rows:
            return []
        return ["Outside the OpenAPI document:", "", *table(("methods", "paths", "scope", "what"), [
            (", ".join(sorted(methods)), ", ".join(paths), scope, what) for methods, paths, scope, what in rows.values()
        ])]

    def _error_statuses(self) -> dict[str, str]:
        """Error statuses whose meaning every route shares (said once, in "Error statuses")."""
        seen: dict[str, set[str]] = {}
        for _, _, op in self.operations:
            for status, response in op["responses"].items():
                if self._is_envelope(response):
                    seen.setdefault(status, set()).add(response.get("description", ""))
        return {status: next(iter(texts)) for status, texts in sorted(seen.items()) if len(texts) == 1}

    @staticmethod
    def _is_envelope(response: Schema) -> bool:
        schema = (response.get("content") or {}).get("application/json", {}).get("schema", {})
        return js.ref_name(schema) == "ErrorResponse"

    @staticmethod
    def _heading(path: str, method: str) -> str:
        return f"{method.upper()} {path}"

    def _scope(self, path: str, method: str, op: Schema) -> str:
        return _scope_text(method.upper(), self.routes.get(path, path), bool(op.get("security")))

    def _operation(self, path: str, method: str, op: Schema) -> list[str]:
        out = [f"## {self._heading(path, method)}", "", f"{op.get('summary', '')}.".replace("..", "."), "",
               f"Scope: {self._scope(path, method, op)}."]
        if op.get("description"):
            out += ["", op["description"].strip()]
        params = op.get("parameters", [])
        if params:
            out += ["", "Parameters:", "", *table(("name", "in", "type", "required", "default", "limits",
                                                   "description"), [
                (code(p["name"]), p["in"], js.type_text(p.get("schema", {}), self.link),
                 "yes" if p.get("required") else "", js.default_text(p.get("schema", {})),
                 js.limits_text(p.get("schema", {})), p.get("description") or js.description(p.get("schema", {})))
                for p in params
            ])]
        body = op.get("requestBody")
        if body:
            for media, content in body.get("content", {}).items():
                schema = content.get("schema", {})
                name = js.ref_name(schema)
                resolved = self.schemas[name] if name else schema
                what = "JSON body" if media == "application/json" else "Multipart form" if "multipart" in media \
                    else f"Body ({code(media)})"
                label = f" ({code(name)})" if name and not name.startswith("Body_") else ""
                out += ["", f"{what}{label}:", "", *self.fields(resolved)]
        shown = [(status, r) for status, r in op["responses"].items()
                 if not (self._is_envelope(r) and self.shared_errors.get(status) == r.get("description", ""))]
        out += ["", "Responses:", "", *table(("status", "meaning", "body"), [
            (status, r.get("description", ""), self._response_body(r)) for status, r in shown
        ])]
        errors = sorted(s for s, r in op["responses"].items() if (s, r) not in shown)
        if errors:
            out += ["", f"Errors ([what they mean](#error-statuses)): {', '.join(errors)}."]
        return out

    def _response_body(self, response: Schema) -> str:
        content = response.get("content") or {}
        if not content:
            return "none"
        parts = []
        for media, body in content.items():
            schema = body.get("schema") or {}
            text = js.type_text(schema, self.link) if schema else "any"
            parts.append(text if media == "application/json" else f"{text} ({code(media)})")
        return ", ".join(parts)

    def _schema_section(self, name: str) -> list[str]:
        schema = self.schemas[name]
        out = [f"### {name}", ""]
        if schema.get("description"):
            out += [" ".join(js.rst_literals(schema["description"]).split()), ""]
        if name in self.inline:
            out += ["A request body (its route shows it too).", ""]
        out += [*self.fields(schema), ""]
        return out


def _settings_text(settings: dict[str, dict[str, list[str]]]) -> str:
    return " and ".join(code(f"RAGSERVE_{section.upper()}__{key.upper()}={','.join(value)}")
                        for section, fields in settings.items() for key, value in fields.items())


def render() -> str:
    app = build_app()
    minilm, sources = build_app(profile="minilm").openapi(), build_app(**SOURCES).openapi()
    return Reference(app.openapi(), app, minilm, sources).render()


def main(argv: Sequence[str] | None = None) -> int:
    return check_or_write(OUTPUT, render, COMMAND, argv)


if __name__ == "__main__":
    sys.exit(main())
