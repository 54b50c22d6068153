"""The OpenAPI document: valid, every reference resolvable, one per deployment (limits from settings,
capabilities it lacks left out), and its request schemas held to the request models: a body the schema
allows is one the model takes, and one it refuses the model refuses too. (The fuzzer holds the whole API
to the document: tests/fuzz.)"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from openapi_spec_validator import validate
from pydantic import ValidationError
from referencing import Registry, Resource

from service.api.app import create_app
from service.api.schemas.collections import CollectionCreate, DocumentsUpsert
from service.api.schemas.embeddings import EmbeddingsRequest
from service.api.schemas.rerank import RerankRequest, RerankV2Request
from service.api.schemas.search import SearchRequest
from service.config import Settings
from tests.support.app import API_KEY, app_client


def document(**settings: Any) -> dict[str, Any]:
    app = create_app(Settings(api_keys=[API_KEY], **settings))
    return app.openapi()


def refs(node: Any) -> set[str]:
    found: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("$ref"), str):
                found.add(item["$ref"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


DEPLOYMENTS = {
    "minilm": {"profile": "minilm"},
    "minilm, server paths and URLs": {"profile": "minilm", "ingest": {"allowed_roots": ["/srv/docs"]},
                                      "fetch": {"allowed_domains": ["example.com"]}},
    "qwen3 with generation": {"profile": "qwen3"},
    "qwen3 without generation": {"profile": "qwen3", "generation": {"enabled": False}},
}


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_the_document_is_valid_and_every_reference_resolves(name: str) -> None:
    doc = document(**DEPLOYMENTS[name])
    validate(doc)
    schemas = doc["components"]["schemas"]
    for ref in refs(doc):
        assert ref.startswith("#/components/schemas/") and ref.split("/")[-1] in schemas, ref
    ingest = doc["paths"]["/v1/collections/{name}/ingest"]["post"]["requestBody"]["content"]
    assert ingest["multipart/form-data"]["schema"]["required"] == ["files"]
    stack: list[Any] = [doc]
    while stack:  # bounds under JSON Schema's names only (Pydantic writes "ge" for some)
        node = stack.pop()
        if isinstance(node, dict):
            assert not ("type" in node and {"ge", "le", "gt", "lt"} & set(node)), node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    for operation in (op for ops in doc["paths"].values() for op in ops.values()):
        if operation.get("security"):
            assert "401" in operation["responses"], operation["operationId"]


def test_capabilities_the_deployment_lacks_are_not_offered() -> None:
    minilm, qwen3 = document(profile="minilm"), document(profile="qwen3")
    for path in ("/v1/rerank", "/v2/rerank", "/v1/chat/completions", "/v1/search/upload"):
        assert path not in minilm["paths"] and path in qwen3["paths"], path
    for path in ("/v1/models", "/v1/models/{model_id}", "/v1/embeddings"):  # every deployment serves these
        assert path in minilm["paths"] and path in qwen3["paths"], path
    search = minilm["components"]["schemas"]["SearchRequest"]
    assert "image" not in search["properties"] and "query" in search["required"]
    assert minilm["components"]["schemas"]["RerankOptions"]["properties"]["enabled"]["const"] is False
    assert "image" in qwen3["components"]["schemas"]["SearchRequest"]["properties"]
    no_generation = document(profile="qwen3", generation={"enabled": False})
    assert "/v1/chat/completions" not in no_generation["paths"] and "/v1/rerank" in no_generation["paths"]


def test_limits_come_from_the_settings() -> None:
    doc = document(profile="qwen3", limits={"max_top_k": 17, "max_rerank_candidates": 23, "max_query_chars": 99,
                                            "max_documents_per_request": 7}, generation={"max_tokens": 321})
    s = doc["components"]["schemas"]
    assert s["SearchRequest"]["properties"]["top_k"]["maximum"] == 17
    assert s["SearchRequest"]["properties"]["query"]["anyOf"][0]["maxLength"] == 99
    assert s["RerankOptions"]["properties"]["top_n"]["anyOf"][0]["maximum"] == 23
    assert s["DocumentsUpsert"]["properties"]["documents"]["maxItems"] == 7
    assert s["RerankRequest"]["properties"]["documents"]["maxItems"] == 23
    assert s["RerankV2Request"]["properties"]["documents"]["maxItems"] == 23
    assert s["ChatCompletionRequest"]["properties"]["max_tokens"]["anyOf"][0]["maximum"] == 321
    vector = s["DocumentIn"]["properties"]["vector"]["anyOf"][0]
    assert (vector["minItems"], vector["maxItems"]) == (32, 1024)  # Qwen3-Embedding's Matryoshka sizes
    minilm = document(profile="minilm")["components"]["schemas"]
    dimensions = minilm["CollectionCreate"]["properties"]["dimensions"]["anyOf"][0]
    assert (dimensions["minimum"], dimensions["maximum"]) == (384, 384)


def test_ingest_sources_follow_the_allowlists() -> None:
    uploads_only = document(profile="minilm")
    body = uploads_only["paths"]["/v1/collections/{name}/ingest"]["post"]["requestBody"]["content"]
    assert list(body) == ["multipart/form-data"]
    doc = document(profile="minilm", ingest={"allowed_roots": ["/srv/docs"]})
    content = doc["paths"]["/v1/collections/{name}/ingest"]["post"]["requestBody"]["content"]
    validator = _validator(doc, content["application/json"]["schema"]["$ref"].split("/")[-1])
    assert validator.is_valid({"source": {"kind": "path", "path": "/srv/docs/a/b.md"}})
    assert not validator.is_valid({"source": {"kind": "path", "path": "/etc/passwd"}})
    assert not validator.is_valid({"source": {"kind": "path", "path": "/srv/docs-other"}})
    assert not validator.is_valid({"source": {"kind": "url", "urls": ["https://example.com/"]}})


def _validator(doc: dict[str, Any], name: str) -> jsonschema.protocols.Validator:
    registry = Registry().with_resource("urn:ragserve", Resource.from_contents(
        {**doc, "$schema": "https://json-schema.org/draft/2020-12/schema"}))
    return jsonschema.Draft202012Validator({"$ref": f"urn:ragserve#/components/schemas/{name}"}, registry=registry)


def _search(**fields: Any) -> dict[str, Any]:
    return {"collection": "kb", "query": "where are vectors kept?", **fields}


def _docs(**fields: Any) -> dict[str, Any]:
    return {"documents": [{"id": "a", "text": "some text", **fields}]}


CONGRUENCE = [
    ("SearchRequest", SearchRequest, _search()),
    ("SearchRequest", SearchRequest, _search(top_k=5, filter={"lang": "en", "year": {"gte": 2020}, "tag": ["a", "b"]})),
    ("SearchRequest", SearchRequest, _search(top_k="5")),
    ("SearchRequest", SearchRequest, _search(top_k=5.0)),  # an integer, as JSON Schema counts them
    ("SearchRequest", SearchRequest, _search(top_k=5.5)),
    ("SearchRequest", SearchRequest, _search(top_k=True)),
    ("SearchRequest", SearchRequest, _search(top_k=0)),
    ("SearchRequest", SearchRequest, _search(query="   ")),
    ("SearchRequest", SearchRequest, _search(query="a\x00b")),
    ("SearchRequest", SearchRequest, _search(query="tab\tand newline\n are text")),
    ("SearchRequest", SearchRequest, _search(filter={"a.b": 1})),
    ("SearchRequest", SearchRequest, _search(filter={"a..b": 1})),
    ("SearchRequest", SearchRequest, _search(filter={"$x": 1})),
    ("SearchRequest", SearchRequest, _search(filter={"n": {}})),
    ("SearchRequest", SearchRequest, _search(filter={"n": {"gt": None}})),
    ("SearchRequest", SearchRequest, _search(filter={"n": [1, "a"]})),
    ("SearchRequest", SearchRequest, _search(filter={"n": []})),
    ("SearchRequest", SearchRequest, _search(filter={"n": 2**63})),
    ("SearchRequest", SearchRequest, _search(filter={"n": 2**63 - 1})),
    ("SearchRequest", SearchRequest, _search(mode="fuzzy")),
    ("SearchRequest", SearchRequest, _search(unknown=1)),
    ("SearchRequest", SearchRequest, _search(rerank={"enabled": False, "top_n": 5})),
    ("SearchRequest", SearchRequest, _search(score_details=True)),
    ("SearchRequest", SearchRequest, _search(score_details="true")),
    ("DocumentsUpsert", DocumentsUpsert, _docs()),
    ("DocumentsUpsert", DocumentsUpsert, _docs(id="")),
    ("DocumentsUpsert", DocumentsUpsert, _docs(id="a\nb")),
    ("DocumentsUpsert", DocumentsUpsert, _docs(text="")),
    ("DocumentsUpsert", DocumentsUpsert, _docs(text=" \n ")),
    ("DocumentsUpsert", DocumentsUpsert, _docs(metadata={"k": {"nested": [1, 2.5, None, True, "x"]}})),
    ("DocumentsUpsert", DocumentsUpsert, _docs(metadata={"": 1})),
    ("DocumentsUpsert", DocumentsUpsert, _docs(metadata={"k\x07": 1})),
    ("DocumentsUpsert", DocumentsUpsert, _docs(metadata={"k": "v\x00"})),
    ("DocumentsUpsert", DocumentsUpsert, _docs(metadata={"k": 2.5e300, "j": -(2**63)})),
    ("DocumentsUpsert", DocumentsUpsert, _docs(vector=[0.0, 0.0])),
    ("DocumentsUpsert", DocumentsUpsert, _docs(vector=[0.0, 1.0])),
    ("DocumentsUpsert", DocumentsUpsert, {"documents": []}),
    ("CollectionCreate", CollectionCreate, {"name": "kb", "filter_fields": {"lang": "keyword", "a.b": "integer"}}),
    ("CollectionCreate", CollectionCreate, {"name": "kb", "filter_fields": {"a b": "keyword"}}),
    ("CollectionCreate", CollectionCreate, {"name": "kb", "filter_fields": {"lang": "string"}}),
    ("CollectionCreate", CollectionCreate, {"name": "kb", "sparse": {"language": "french", "k1": 0.9}}),
    ("CollectionCreate", CollectionCreate, {"name": "kb", "sparse": {"language": "klingon"}}),
    ("CollectionCreate", CollectionCreate, {"name": "kb", "sparse": {"k1": 1e308}}),
    ("CollectionCreate", CollectionCreate, {"name": "-kb"}),
    ("CollectionCreate", CollectionCreate, {"name": "kb", "sparse": "yes"}),
    ("EmbeddingsRequest", EmbeddingsRequest, {"input": ["a", "b"], "truncate": "NONE"}),
    ("EmbeddingsRequest", EmbeddingsRequest, {"input": "a", "truncate": "START"}),
    ("EmbeddingsRequest", EmbeddingsRequest, {"input": [1, 2]}),
    ("EmbeddingsRequest", EmbeddingsRequest, {"input": []}),
    ("EmbeddingsRequest", EmbeddingsRequest, {"input": [""]}),
    ("RerankRequest", RerankRequest, {"query": "q", "documents": ["a", {"text": "b", "id": "c"}], "return_documents":
                                      True, "rank_fields": ["text"], "max_chunks_per_doc": 1, "top_n": 1}),
    ("RerankRequest", RerankRequest, {"query": "q", "documents": [{"text": 1}]}),
    ("RerankRequest", RerankRequest, {"query": "q", "documents": ["a"], "max_tokens_per_doc": 5}),
    ("RerankV2Request", RerankV2Request, {"query": "q", "documents": ["a"], "model": "m", "max_tokens_per_doc": 9,
                                          "priority": 0, "relevant_spans": {"mode": "disabled", "threshold": 0.5}}),
    ("RerankV2Request", RerankV2Request, {"query": "q", "documents": [{"text": "a"}]}),
    ("RerankV2Request", RerankV2Request, {"query": "q", "documents": ["a"], "relevant_spans": {"mode": "maybe"}}),
    ("RerankV2Request", RerankV2Request, {"query": "q", "documents": ["a"], "return_documents": True}),
]


# One difference is known and kept: a metadata integer beyond 64 bits (the store would give it back as a
# float, so the model refuses it) is, to JSON Schema, the same number as a float, which metadata may hold.


@pytest.mark.parametrize(("schema", "model", "body"), CONGRUENCE, ids=[repr(c[2])[:80] for c in CONGRUENCE])
def test_schema_and_model_agree(schema: str, model: Any, body: dict[str, Any]) -> None:
    # qwen3 with generation: the document with every field; vector sizes checked by the handler (dimensions
    # depend on the collection), so the model-level congruence leaves them out of the document's bounds.
    doc = document(profile="qwen3")
    doc["components"]["schemas"]["DocumentIn"]["properties"]["vector"]["anyOf"][0].pop("minItems")
    by_schema = _validator(doc, schema).is_valid(body)
    try:
        model.model_validate(body)
        by_model = True
    except ValidationError:
        by_model = False
    assert by_schema == by_model, f"schema says {by_schema}, model says {by_model}"


def test_every_error_is_documented_as_the_envelope_and_ready_as_what_it_answers() -> None:
    doc = document(profile="minilm")
    for path, item in doc["paths"].items():
        for method, op in item.items():
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")) and (path, status) != ("/ready", "503"):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, (method, path, status)
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    ready = doc["paths"]["/ready"]["get"]["responses"]
    for status in ("200", "503"):
        assert ready[status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ReadinessResponse"}


def _response_schema(doc: dict[str, Any], path: str, method: str, status: str) -> dict[str, Any]:
    schema: dict[str, Any] = doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
    return schema


def _response_validator(doc: dict[str, Any], path: str, method: str, status: str) -> jsonschema.protocols.Validator:
    ref = _response_schema(doc, path, method, status)["$ref"]
    return _validator(doc, ref.split("/")[-1])


def test_the_runner_routes_200s_are_typed() -> None:
    doc = document(profile="qwen3")
    expected = {("/v1/embeddings", "post"): "EmbeddingsResponse", ("/v1/rerank", "post"): "RerankResponse",
                ("/v2/rerank", "post"): "RerankV2Response", ("/v1/models", "get"): "ModelList",
                ("/v1/models/{model_id}", "get"): "ModelCard"}
    for (path, method), model in expected.items():
        assert _response_schema(doc, path, method, "200") == {"$ref": f"#/components/schemas/{model}"}, path
    assert _response_schema(doc, "/v1/models/{model_id}", "get", "404") == {
        "$ref": "#/components/schemas/ErrorResponse"}


async def test_answers_are_what_the_document_says(qwen3_settings: Settings) -> None:
    """Real answers of the runner routes (the tiny Qwen3 runners), each validated against its response schema in
    the document this deployment serves."""
    texts = ["The quick brown fox", "Espresso is brewed under pressure"]
    calls = [
        ("/v1/embeddings", "post", {"input": texts}, "200"),
        ("/v1/embeddings", "post", {"input": "one", "encoding_format": "base64", "dimensions": 32}, "200"),
        ("/v1/rerank", "post", {"query": "coffee", "documents": [texts[0], {"text": texts[1], "id": "b"}],
                                "return_documents": True, "top_n": 1}, "200"),
        ("/v1/rerank", "post", {"query": "coffee", "documents": texts}, "200"),
        ("/v2/rerank", "post", {"query": "coffee", "documents": texts, "model": "m"}, "200"),
        ("/v1/models", "get", None, "200"),
        ("/v1/models/{model_id}", "get", None, "200"),
        ("/v1/models/{model_id}", "get", None, "404"),
        ("/v1/embeddings", "post", {"input": [[1, 2]]}, "422"),
        ("/v2/rerank", "post", {"query": "coffee", "documents": texts, "relevant_spans": {"mode": "enabled"}}, "422"),
    ]
    concrete = {"/v1/models/{model_id}": iter(["/v1/models/Qwen/Qwen3-Reranker-0.6B", "/v1/models/nope"])}
    async with app_client(qwen3_settings) as client:
        served = (await client.get("/openapi.json")).json()
        answers = []
        for path, method, body, _ in calls:
            url = next(concrete[path]) if path in concrete else path
            answers.append(await client.request(method.upper(), url, json=body))
    for (path, method, _, status), answer in zip(calls, answers, strict=True):
        assert str(answer.status_code) == status, (path, answer.text)
        errors = list(_response_validator(served, path, method, status).iter_errors(answer.json()))
        assert errors == [], (path, status, [e.message for e in errors])
    assert [(m["id"], m["task"]) for m in answers[5].json()["data"]] == [  # the profile's generator, though not up
        ("Qwen/Qwen3-VL-2B-Instruct", "generate"), ("Qwen/Qwen3-Embedding-0.6B", "embed"),
        ("Qwen/Qwen3-Reranker-0.6B", "rerank")]
