"""The OpenAPI document of one deployment: what *this* app accepts, so that data its schema allows is
data its handlers take (a fuzzer holds the two together: tests/fuzz).

FastAPI derives the document from the routes and the request models; this module completes it with what
only the settings and the profile know:

- the ingest body, which the route reads itself: ``IngestRequest`` (JSON, with the sources this
  deployment allows: a server path only under ``RAGSERVE_INGEST__ALLOWED_ROOTS``, URLs only with
  ``RAGSERVE_FETCH__ALLOWED_DOMAINS``) or multipart ``files`` + ``options`` (``IngestOptions``);
- the limits from settings (``top_k``, ``top_n``, query length, documents per request, dimensions...);
- capabilities the deployment lacks are left out: without a reranker ``/v1/rerank``, ``/v2/rerank`` and
  reranking in ``/v1/search``; without a generator ``/v1/chat/completions``, ``/v1/search/upload`` and
  search by image, so a query is required (the routes still answer, with a 400 that names the missing runner);
  ``/v1/models`` lists what there is on every deployment;
- dictionary keys as ``propertyNames`` (Pydantic writes ``patternProperties``, which lets any other key
  through, unlike the models);
- a 401 on every operation that needs a key, and links between operations (create a collection, then
  write to it, search it, ingest into it and follow the job) for stateful testing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from indexer.spec import IngestOptions
from service.api.schemas.errors import ErrorResponse
from service.api.schemas.jobs import IngestRequest
from service.config import Settings
from service.documents.payload import (
    ID_PATTERN,
    INT64_MAX,
    INT64_MIN,
    MAX_METADATA_DEPTH,
    NON_BLANK_TEXT_PATTERN,
    TEXT_PATTERN,
)
from service.profiles import Profile, resolve_generator
from service.sparse.languages import legacy_languages, qdrant_languages

Schema = dict[str, Any]
GENERATION_PATHS = ("/v1/chat/completions", "/v1/search/upload")
RERANK_PATHS = ("/v1/rerank", "/v2/rerank")
REF = "#/components/schemas/{model}"


def install_openapi(app: FastAPI, settings: Settings, profile: Profile) -> None:
    """Make ``app.openapi()`` build (once) and return this deployment's document."""

    def openapi() -> Schema:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description,
                              routes=app.routes)
            app.openapi_schema = deployment_document(doc, settings, profile)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def deployment_document(doc: Schema, settings: Settings, profile: Profile) -> Schema:
    schemas: dict[str, Schema] = doc.setdefault("components", {}).setdefault("schemas", {})
    paths: dict[str, dict[str, Schema]] = doc["paths"]
    limits = settings.limits
    has_generator = resolve_generator(profile, enabled=settings.generation.enabled,
                                      model=settings.generation.model) is not None

    _ingest_body(paths, schemas, settings)
    _walk(doc, _property_names)
    _walk(doc, _integer_bounds)

    def props(name: str) -> dict[str, Schema]:
        return schemas[name]["properties"]  # type: ignore[no-any-return]

    search = props("SearchRequest")
    _set(search["top_k"], maximum=limits.max_top_k)
    _first(search["query"], "string")["maxLength"] = limits.max_query_chars
    _first(props("RerankOptions")["top_n"], "integer")["maximum"] = limits.max_rerank_candidates
    if profile.reranker is None:
        for path in RERANK_PATHS:
            paths.pop(path, None)
        rerank = schemas["RerankOptions"]
        rerank["properties"]["enabled"] = {"const": False, "description": "This deployment has no reranker."}
        rerank["required"] = ["enabled"]
    if not has_generator:
        for path in GENERATION_PATHS:
            paths.pop(path, None)
        search.pop("image", None)
        search["query"] = {**_first(search["query"], "string"), "description": search["query"]["description"]}
        schemas["SearchRequest"]["required"].append("query")
    else:
        chat = props("ChatCompletionRequest")
        for key in ("max_tokens", "max_completion_tokens"):
            _first(chat[key], "integer")["maximum"] = settings.generation.max_tokens
        retrieval = props("RetrievalOptions")
        _first(retrieval["top_k"], "integer")["maximum"] = limits.max_top_k
        _first(retrieval["rerank_candidates"], "integer")["maximum"] = limits.max_rerank_candidates

    _context_body(schemas, settings, profile, has_generator)
    _feedback_body(schemas, settings)

    schemas["MetadataValue"] = _metadata_value()
    for holder in (props("DocumentIn"), props("IngestOptions")):
        holder["metadata"]["additionalProperties"] = {"$ref": REF.format(model="MetadataValue")}

    upsert = props("DocumentsUpsert")["documents"]
    upsert["maxItems"] = limits.max_documents_per_request
    document = props("DocumentIn")
    document["text"]["maxLength"] = limits.max_document_bytes
    document["text"]["description"] += f" At most {limits.max_document_bytes} bytes of UTF-8."
    document["metadata"]["description"] += f" At most {limits.max_metadata_bytes} bytes as JSON."

    model = profile.embedding
    low, high = model.matryoshka_min_dim or model.dimensions, model.dimensions
    _set(_first(document["vector"], "array"), minItems=low, maxItems=high)
    _set(_first(props("CollectionCreate")["dimensions"], "integer"), minimum=low, maximum=high)
    if "/v1/embeddings" in paths:
        embeddings = props("EmbeddingsRequest")
        _set(_first(embeddings["dimensions"], "integer"), minimum=low, maximum=high)
        _first(embeddings["input"], "array")["maxItems"] = limits.max_documents_per_request
    if "/v1/rerank" in paths:
        for name in ("RerankRequest", "RerankV2Request"):
            props(name)["documents"]["maxItems"] = limits.max_rerank_candidates

    sparse = props("SparseOptions")
    sparse["language"]["enum"] = sorted({*qdrant_languages(), *legacy_languages()})
    sparse["language"]["description"] += (f" With the qdrant encoder: {', '.join(qdrant_languages())}; with the "
                                          f"ragserve encoder: {', '.join(legacy_languages())}.")

    _unauthorized(paths)
    _links(paths)
    return doc


def _ingest_body(paths: dict[str, dict[str, Schema]], schemas: dict[str, Schema], settings: Settings) -> None:
    """The two bodies of ``POST /v1/collections/{name}/ingest``; the route reads them itself."""
    for model in (IngestRequest, IngestOptions):
        schema = model.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    sources: list[Schema] = []
    mapping: dict[str, str] = {}
    roots = [str(r.resolve()) for r in settings.ingest.allowed_roots]
    if roots:
        path = schemas["PathSource"]
        path["required"] = ["kind", "path"]
        path["properties"]["path"]["pattern"] = "^(" + "|".join(re.escape(r) for r in roots) + ")(/.*)?$"
        path["properties"]["path"]["examples"] = roots
        path["properties"]["name_prefix"]["allOf"] = [{"not": {"pattern": "^/"}},
                                                      {"not": {"pattern": r"(^|/)\.\.(/|$)"}}]
        sources.append({"$ref": REF.format(model="PathSource")})
        mapping["path"] = REF.format(model="PathSource")
    if settings.fetch.allowed_domains:
        url = schemas["UrlSource"]
        url["required"] = ["kind", "urls"]
        url["properties"]["urls"]["items"] = {"type": "string", "format": "uri", "pattern": "^https?://"}
        sources.append({"$ref": REF.format(model="UrlSource")})
        mapping["url"] = REF.format(model="UrlSource")
    request = schemas["IngestRequest"]
    request["properties"]["source"] = {"oneOf": sources, "discriminator": {"propertyName": "kind", "mapping": mapping}}
    content: Schema = {}
    if sources:
        content["application/json"] = {"schema": {"$ref": REF.format(model="IngestRequest")}}
    else:
        schemas.pop("IngestRequest")
    content["multipart/form-data"] = {
        "schema": {"type": "object", "required": ["files"], "properties": {
            "files": {"type": "array", "minItems": 1, "maxItems": settings.limits.max_upload_files,
                      "items": {"type": "string", "format": "binary"},
                      "description": "Files; each file name may be a relative path (kept as the document id). "
                      f"At most {settings.ingest.max_file_bytes} bytes each."},
            "options": {"$ref": REF.format(model="IngestOptions")},
        }},
        "encoding": {"options": {"contentType": "application/json"}},
    }
    operation = paths["/v1/collections/{name}/ingest"]["post"]
    operation["requestBody"] = {"required": True, "content": content}


def _context_body(schemas: dict[str, Schema], settings: Settings, profile: Profile, has_generator: bool) -> None:
    """/v1/context's limits, the served tokenizers' names, and the rules its fields keep together: exactly one of
    ``query`` and ``messages``, a collection named one way or the other, a user turn in a conversation."""
    body = schemas["ContextRequest"]
    fields, limits, cs = body["properties"], settings.limits, settings.context
    _set(_first(fields["candidates"], "integer"), maximum=limits.max_top_k)
    _set(_first(fields["neighbours"], "integer"), maximum=cs.max_neighbours)
    _set(fields["budget_tokens"], minimum=min(32, cs.max_budget_tokens), maximum=cs.max_budget_tokens)
    fields["budget_tokens"]["description"] += " The default template's header always fits in 32."
    _first(fields["query"], "string")["maxLength"] = limits.max_query_chars
    _first(fields["collections"], "array")["maxItems"] = cs.max_collections
    names = [profile.embedding.name, *([profile.reranker.name] if profile.reranker else [])]
    generator = resolve_generator(profile, enabled=settings.generation.enabled, model=settings.generation.model)
    if generator is not None:
        names.append(generator.name)
    _first(fields["tokenizer"], "string")["enum"] = names
    template = _first(fields["template"], "string")
    template["allOf"] = [{"pattern": r"\{number\}"}, {"pattern": r"\{text\}"}]
    messages = _first(fields["messages"], "array")
    # a user turn with words: the query is built from the user turns' text (an image alone needs a generator)
    messages["contains"] = {"type": "object", "required": ["role", "content"], "properties": {
        "role": {"const": "user"}, "content": {"type": "string", "pattern": NON_BLANK_TEXT_PATTERN}}}
    if not has_generator:  # no image -> query path: a turn's parts are text only
        message = dict(schemas["ChatMessage"])
        text = _first(message["properties"]["content"], "string")
        content = {"anyOf": [text, {"type": "array", "items": {"$ref": REF.format(model="TextPart")}},
                             {"type": "null"}]}
        messages["items"] = {**message, "properties": {**message["properties"], "content": content}}
        body["properties"].pop("rewrite", None)

    def present(name: str, type_: str) -> Schema:
        return {"required": [name], "properties": {name: {"type": type_}}}

    body["allOf"] = [{"oneOf": [present("query", "string"), present("messages", "array")]},
                     {"oneOf": [present("collection", "string"), present("collections", "array")]}]


def _metadata_value() -> Schema:
    """A metadata value as JSON Schema, recursively (the depth limit is the one thing it cannot say)."""
    ref = {"$ref": REF.format(model="MetadataValue")}
    return {
        "description": f"A JSON value; arrays and objects nested at most {MAX_METADATA_DEPTH} levels in all; "
                       "integers within 64 bits (the store would give a larger one back as a float).",
        "anyOf": [
            {"type": "string", "pattern": TEXT_PATTERN},
            {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
            {"type": "array", "items": ref},
            {"type": "object", "propertyNames": {"minLength": 1, "maxLength": 256, "pattern": ID_PATTERN},
             "additionalProperties": ref},
        ],
    }


def _feedback_body(schemas: dict[str, Schema], settings: Settings) -> None:
    """What the feedback use case checks (service/quality/log.py), stated: the rating's range, this deployment's
    comment limit, and exactly one of ``chunk_id`` and ``doc_id`` (a string each: null names nothing)."""
    feedback = schemas["FeedbackRequest"]
    fields = feedback["properties"]
    _set(fields["rating"], minimum=-1, maximum=3)
    _first(fields["comment"], "string")["maxLength"] = settings.query_log.max_comment_chars
    for name in ("chunk_id", "doc_id"):
        fields[name] = {**_first(fields[name], "string"), "description": fields[name].get("description", "")}
    feedback["oneOf"] = [{"required": ["chunk_id"]}, {"required": ["doc_id"]}]


def _set(schema: Schema, **values: Any) -> None:
    schema.update(values)


def _first(schema: Schema, type_: str) -> Schema:
    """The member of type ``type_`` of an ``anyOf`` (an optional field), or the schema itself."""
    for option in schema.get("anyOf", [schema]):
        if option.get("type") == type_:
            return option  # type: ignore[no-any-return]
    raise KeyError(f"no {type_} in {schema}")


def _walk(node: Any, fn: Callable[[Schema], None]) -> None:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            fn(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _property_names(schema: Schema) -> None:
    """``patternProperties`` with one pattern and nothing else → ``propertyNames`` + ``additionalProperties``:
    Pydantic refuses keys that do not match, which ``patternProperties`` alone would allow."""
    patterns = schema.get("patternProperties")
    if isinstance(patterns, dict) and len(patterns) == 1 and "properties" not in schema:
        ((pattern, value),) = patterns.items()
        del schema["patternProperties"]
        schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}
        schema["additionalProperties"] = value


BOUND_KEYWORDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def _integer_bounds(schema: Schema) -> None:
    """Bounds as JSON Schema keywords, integers' as integers. Pydantic writes a constraint on a type with a
    before-validator (``JsonInt``) under its own name (``ge``), and integer bounds as floats, and 2**63 - 1
    as a float is 2**63."""
    if schema.get("type") not in ("integer", "number"):
        return
    for ours, keyword in BOUND_KEYWORDS.items():
        if ours in schema and not isinstance(schema[ours], dict):
            schema[keyword] = schema.pop(ours)
    if schema["type"] != "integer":
        return
    for key in ("minimum", "maximum"):
        if isinstance(schema.get(key), float):
            schema[key] = min(max(int(schema[key]), INT64_MIN), INT64_MAX)


def _unauthorized(paths: dict[str, dict[str, Schema]]) -> None:
    envelope = {"application/json": {"schema": {"$ref": REF.format(model=ErrorResponse.__name__)}}}
    for operations in paths.values():
        for operation in operations.values():
            if operation.get("security"):
                operation["responses"].setdefault("401", {"description": "Missing or invalid API key",
                                                          "content": envelope})


def _links(paths: dict[str, dict[str, Schema]]) -> None:
    """OpenAPI links: where a response's values may be used next."""
    name = "$response.body#/name"
    links: dict[tuple[str, str, str], dict[str, Schema]] = {
        ("/v1/collections", "post", "201"): {
            "GetCollection": {"operationId": _op(paths, "/v1/collections/{name}", "get"), "parameters": {"name": name}},
            "DeleteCollection": {"operationId": _op(paths, "/v1/collections/{name}", "delete"),
                                 "parameters": {"name": name}},
            "UpsertDocuments": {"operationId": _op(paths, "/v1/collections/{name}/documents", "post"),
                                "parameters": {"name": name}},
            "Ingest": {"operationId": _op(paths, "/v1/collections/{name}/ingest", "post"),
                       "parameters": {"name": name}},
            "Search": {"operationId": _op(paths, "/v1/search", "post"), "requestBody": {"collection": name}},
        },
        ("/v1/collections/{name}/documents", "post", "200"): {
            "DeleteDocument": {"operationId": _op(paths, "/v1/collections/{name}/documents/{doc_id}", "delete"),
                               "parameters": {"name": "$response.body#/collection",
                                              "doc_id": "$request.body#/documents/0/id"}},
            "Search": {"operationId": _op(paths, "/v1/search", "post"),
                       "requestBody": {"collection": "$response.body#/collection"}},
        },
        ("/v1/collections/{name}/ingest", "post", "202"): {
            "GetJob": {"operationId": _op(paths, "/v1/jobs/{job_id}", "get"),
                       "parameters": {"job_id": "$response.body#/id"}},
            "CancelJob": {"operationId": _op(paths, "/v1/jobs/{job_id}", "delete"),
                          "parameters": {"job_id": "$response.body#/id"}},
        },
    }
    for (path, method, status), link in links.items():
        paths[path][method]["responses"][status]["links"] = link


def _op(paths: dict[str, dict[str, Schema]], path: str, method: str) -> str:
    return str(paths[path][method]["operationId"])
