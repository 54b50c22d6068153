from __future__ import annotations

import pytest

from service.config import Settings
from tests.support.app import app_client

PROTECTED = [
    ("GET", "/ready"), ("GET", "/metrics"), ("GET", "/v1/collections"), ("POST", "/v1/collections"),
    ("GET", "/v1/collections/{name}"), ("DELETE", "/v1/collections/{name}"),
    ("POST", "/v1/collections/{name}/documents"), ("DELETE", "/v1/collections/{name}/documents/{doc_id:path}"),
    ("POST", "/v1/collections/{name}/documents/delete"),
    ("POST", "/v1/collections/{name}/ingest"),
    ("GET", "/v1/jobs"), ("GET", "/v1/jobs/{job_id}"), ("DELETE", "/v1/jobs/{job_id}"),
    ("POST", "/v1/search"), ("POST", "/v1/search/upload"), ("POST", "/v1/embeddings"), ("POST", "/v1/rerank"),
    ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
    ("GET", "/mcp"), ("POST", "/mcp"), ("DELETE", "/mcp"),
]


def _concrete(path: str) -> str:
    return path.replace("{name}", "x").replace("{job_id}", "j").replace("{doc_id:path}", "d")


@pytest.mark.parametrize("key", [None, "wrong-key-wrong-key-wrong"], ids=["missing", "wrong"])
async def test_every_route_but_health_needs_a_key(minilm_settings: Settings, key: str | None) -> None:
    async with app_client(minilm_settings, api_key=key) as client:
        assert (await client.get("/health")).status_code == 200
        for method, path in PROTECTED:
            r = await client.request(method, _concrete(path), json={})
            assert r.status_code == 401, (method, path, r.text)
            assert r.json()["error"]["type"] == "authentication_error"


async def test_every_route_in_the_app_is_covered(minilm_settings: Settings) -> None:
    from service.api.app import create_app

    app = create_app(minilm_settings)
    routes = {(m, r.path) for r in app.routes for m in getattr(r, "methods", ()) if m != "HEAD"}
    documented = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/health"}
    assert {r for r in routes if r[1] not in documented} == set(PROTECTED)


async def test_a_second_configured_key_works(minilm_settings: Settings) -> None:
    minilm_settings.api_keys.append(type(minilm_settings.api_keys[0])("second-key-abcdefghijkl"))
    async with app_client(minilm_settings, api_key="second-key-abcdefghijkl") as client:
        assert (await client.get("/v1/collections")).status_code == 200


def test_app_refuses_to_start_without_keys(minilm_settings: Settings) -> None:
    from service.api.app import create_app

    minilm_settings.api_keys.clear()
    with pytest.raises(ValueError, match="API keys"):
        create_app(minilm_settings)
