"""A planned route answers every request exactly as FastAPI's own handler does: the same status, headers and
bytes, the same dependencies called in the same order, the same refusals in the same precedence.

Each request is sent twice to one app: once as the app serves it (routes with a plan use it) and once with every
route's plan taken away (FastAPI's handler). First a small app that uses every feature the plan covers, with a log
of the dependency calls; then ragserve's own app on the routes a chat app calls, with their refusals.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, BackgroundTasks, Cookie, Depends, FastAPI, Form, Header, HTTPException, Request, Response
from fastapi.responses import PlainTextResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict

from service.api import json_body
from service.api.json_body import JsonRoute
from tests.support.app import API_KEY, app_client
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings

calls: list[str] = []
bearer = HTTPBearer(auto_error=False)


async def services(request: Request) -> str:
    calls.append("services")
    return "services"


async def principal(request: Request,
                    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> str:
    calls.append("principal")
    if credentials is None:
        raise HTTPException(401, "no key")
    if credentials.credentials == "refused":
        raise HTTPException(403, "refused")
    return credentials.credentials


async def fresh(request: Request) -> int:
    calls.append("fresh")
    return len(calls)


async def from_generator() -> AsyncIterator[int]:
    yield 1


async def with_query(limit: int = 1) -> int:
    return limit


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str
    n: int = 1


class Answer(BaseModel):
    text: str
    n: int
    who: str
    services: str
    item_id: int
    q: int
    tag: str | None
    session: str | None
    fresh: list[int]


router = APIRouter(route_class=JsonRoute, dependencies=[Depends(principal)])


@router.post("/items/{item_id}")
async def post_item(item_id: int, item: Item, who: Annotated[str, Depends(principal)],
                    svc: Annotated[str, Depends(services)], a: Annotated[int, Depends(fresh, use_cache=False)],
                    b: Annotated[int, Depends(fresh, use_cache=False)], c: Annotated[int, Depends(fresh)],
                    q: int = 0, x_tag: Annotated[str | None, Header()] = None,
                    session: Annotated[str | None, Cookie()] = None) -> Answer:
    calls.append("endpoint")
    return Answer(text=item.text, n=item.n, who=who, services=svc, item_id=item_id, q=q, tag=x_tag,
                  session=session, fresh=[a, b, c])


@router.get("/plain")
async def plain(raw: Request) -> dict[str, Any]:
    return {"path": raw.url.path, "json": type(raw).__name__, "nested": {"t": (1, 2)}}


@router.post("/created", status_code=201)
async def created(item: Item) -> Item:
    return item


@router.delete("/gone", status_code=204)
async def gone() -> None:
    return None


@router.get("/text")
async def text() -> PlainTextResponse:
    return PlainTextResponse("as it is")


async def _gen_dep(x: Annotated[int, Depends(from_generator)]) -> None: ...
async def _form(f: Annotated[str, Form()]) -> None: ...
def _sync() -> None: ...
async def _tasks(t: BackgroundTasks) -> None: ...
async def _response(r: Response) -> None: ...
async def _sub_query(x: Annotated[int, Depends(with_query)]) -> None: ...


UNPLANNED: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
    ("/u/generator-dependency", _gen_dep, {}), ("/u/form", _form, {}), ("/u/sync", _sync, {}),
    ("/u/background-tasks", _tasks, {}), ("/u/response-parameter", _response, {}),
    ("/u/dependency-with-a-parameter", _sub_query, {}),
    ("/u/response-class", _sync, {"response_class": PlainTextResponse}),
]
for path, endpoint, options in UNPLANNED:
    router.add_api_route(path, endpoint, methods=["POST"], **options)


def _app() -> FastAPI:
    app = FastAPI()
    app.include_router(router)
    return app


def _routes(app: FastAPI) -> list[JsonRoute]:
    return [r for r in app.routes if isinstance(r, JsonRoute)]


async def _both_ways(app: Any, routes: list[JsonRoute], send: Callable[[httpx.AsyncClient], Any],
                     monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], int]:
    """What ``send`` got from the app as it is and with every plan taken away; how many requests the plans served."""
    planned = 0
    real_serve = json_body.serve

    async def counted(*args: Any) -> Any:
        nonlocal planned
        planned += 1
        return await real_serve(*args)

    monkeypatch.setattr(json_body, "serve", counted)
    out = []
    plans = [r.plan for r in routes]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        out.append(await send(client))
        for r in routes:
            r.plan = None
        try:
            out.append(await send(client))
        finally:
            for r, plan in zip(routes, plans, strict=True):
                r.plan = plan
    return out, planned


def _answer(r: httpx.Response) -> tuple[int, list[tuple[str, str]], bytes]:
    return r.status_code, [(k, v) for k, v in r.headers.multi_items() if k != "x-request-id"], r.content


def test_the_plan_covers_what_it_claims_and_no_more() -> None:
    app = _app()
    assert sorted(r.path for r in _routes(app) if r.plan is not None) == [
        "/created", "/gone", "/items/{item_id}", "/plain", "/text"]
    assert [r.plan for r in _routes(app) if r.path.startswith("/u/")] == [None] * len(UNPLANNED)


KEY = {"authorization": "Bearer k"}
JSON = {"content-type": "application/json"}
SMALL_APP_REQUESTS: list[tuple[str, str, dict[str, str], bytes]] = [
    ("POST", "/items/3?q=2", {**KEY, **JSON, "x-tag": "t", "cookie": "session=s"}, b'{"text": "a", "n": 5}'),
    ("POST", "/items/3", {**KEY, **JSON}, b'{"text": "a"}'),
    ("POST", "/items/abc?q=z", {**KEY, **JSON}, b'{"text": 1, "extra": 2}'),  # path, query, body errors in order
    ("POST", "/items/3", {**KEY, **JSON}, b""),  # the body is missing
    ("POST", "/items/3", {**KEY, **JSON}, b'{"text": '),  # not JSON
    ("POST", "/items/3", JSON, b'{"text": '),  # not JSON, no key: the body's 400 comes first
    ("POST", "/items/3", JSON, b'{"text": 1}'),  # a bad body, no key: the key's 401 comes first
    ("POST", "/items/3", {"authorization": "Bearer refused", **JSON}, b'{"text": "a"}'),  # 403
    ("POST", "/items/3", {"authorization": "Basic k", **JSON}, b'{"text": "a"}'),  # not a bearer: no key
    ("POST", "/items/3", {**KEY, "content-type": "text/plain"}, b'{"text": "a"}'),  # FastAPI's rules
    ("POST", "/items/3", {**KEY, "content-type": "application/json; charset=utf-8"}, b'{"text": "a"}'),
    ("GET", "/plain", KEY, b""),
    ("POST", "/created", {**KEY, **JSON}, b'{"text": "b"}'),
    ("DELETE", "/gone", KEY, b""),
    ("GET", "/text", KEY, b""),
]


@pytest.mark.parametrize(("method", "path", "headers", "body"), SMALL_APP_REQUESTS,
                         ids=[f"{m} {p} {b[:12]!r}" for m, p, _, b in SMALL_APP_REQUESTS])
async def test_a_planned_request_is_answered_as_fastapi_answers_it(
        method: str, path: str, headers: dict[str, str], body: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app()

    async def send(client: httpx.AsyncClient) -> tuple[Any, list[str]]:
        calls.clear()
        r = await client.request(method, path, headers=headers, content=body)
        return _answer(r), list(calls)

    (planned, generic), served = await _both_ways(app, _routes(app), send, monkeypatch)
    assert planned == generic
    plain_json = headers.get("content-type") in (None, "application/json")
    assert served == (1 if plain_json else 0)


async def test_overridden_dependencies_are_left_to_fastapi(monkeypatch: pytest.MonkeyPatch) -> None:
    app = _app()

    async def stand_in(request: Request) -> str:
        return "stand-in"

    app.dependency_overrides[services] = stand_in

    async def send(client: httpx.AsyncClient) -> Any:
        r = await client.post("/items/1", headers={**KEY, **JSON}, content=b'{"text": "a"}')
        return r.json()["services"]

    assert await _both_ways(app, _routes(app), send, monkeypatch) == (["stand-in", "stand-in"], 0)


# --- ragserve's app -----------------------------------------------------------------------------------------

DOCS = [{"id": "a", "text": "The device fails to boot after the firmware update.", "metadata": {"team": "hw"}},
        {"id": "b", "text": "Error XQ-7719 is reported by the loader.", "metadata": {"team": "fw"}}]
_TIMINGS = re.compile(rb'"timings_ms":\{[^{}]*\}')
_SEARCH_ID = re.compile(rb'"search_id":"s_[0-9a-f]{32}"')
"""Each search's own random id (issue 39): the same request answers another id each time, by design."""
AUTH = {"authorization": f"Bearer {API_KEY}"}
APP_REQUESTS: list[tuple[str, str, dict[str, str], Any]] = [
    ("POST", "/v1/search", AUTH, {"collection": "kb", "query": "boot failure", "mode": "hybrid"}),
    ("POST", "/v1/search", AUTH, {"collection": "kb", "query": "XQ-7719", "filter": {"team": "fw"}, "top_k": 1}),
    ("POST", "/v1/search", AUTH, {"collection": "kb", "query": "x", "top_k": 0}),  # 422
    ("POST", "/v1/search", AUTH, {"collection": "nope", "query": "x"}),  # 404
    ("POST", "/v1/search", {}, {"collection": "kb", "query": "x"}),  # 401 missing
    ("POST", "/v1/search", {"authorization": "Bearer wrong-key-wrong-key"}, {"collection": "kb"}),  # 401 invalid
    ("POST", "/v1/search", {}, b'{"collection": '),  # 400 invalid_json before the key
    ("POST", "/v1/search", AUTH, b""),  # 422 body missing
    ("POST", "/v1/embeddings", AUTH, {"input": ["one", "two"], "model": "sentence-transformers/all-MiniLM-L6-v2"}),
    ("GET", "/v1/collections", AUTH, None),
    ("GET", "/v1/collections/kb", AUTH, None),
    ("GET", "/v1/collections/nope", AUTH, None),
    ("GET", "/v1/jobs?limit=nope", AUTH, None),
    ("GET", "/v1/models", AUTH, None),
    ("POST", "/v1/collections", AUTH, {"name": "kb"}),  # 409: it exists
    ("POST", "/v1/collections", AUTH, {"name": "Bad Name!"}),
]


async def test_ragserve_answers_the_same_bytes_planned_or_not(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """One app (its store in this process: the claim is not about the store's process boundary), each request
    of ``APP_REQUESTS`` sent both ways."""
    runner = ScriptedEmbedder()
    settings = scripted_settings(tmp_path, qdrant={"edge_process": False})
    async with app_client(settings, transports={"embedding": runner.transport}) as admin:
        assert (await admin.post("/v1/collections", json={"name": "kb"})).status_code == 201
        assert (await admin.post("/v1/collections/kb/documents", json={"documents": DOCS})).status_code == 200
        asgi = admin._transport.app  # type: ignore[attr-defined]
        app = next(c.cell_contents for c in asgi.__closure__ if isinstance(c.cell_contents, FastAPI))
        routes = [r for r in app.routes if isinstance(r, JsonRoute)]
        answers = []
        for method, path, headers, body in APP_REQUESTS:
            content = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()

            async def send(client: httpx.AsyncClient, method: str = method, path: str = path,
                           headers: dict[str, str] = headers, content: bytes | None = content) -> Any:
                r = await client.request(method, path, headers={"content-type": "application/json", **headers},
                                         content=content)
                assert r.headers["content-length"] == str(len(r.content))
                status, head, raw = _answer(r)  # timings: milliseconds on the clock, and the length that follows
                return (status, [h for h in head if h[0] != "content-length"],
                        _SEARCH_ID.sub(b'"search_id":"s_"', _TIMINGS.sub(b'"timings_ms":{}', raw)))

            (planned, generic), served = await _both_ways(asgi, routes, send, monkeypatch)
            answers.append(((method, path, body), served, planned, generic))
    assert [(request, served) for request, served, _, _ in answers] == [(a[0], 1) for a in answers]
    for request, _, planned, generic in answers:
        assert planned == generic, request
    assert {planned[0] for _, _, planned, _ in answers} == {200, 400, 401, 404, 409, 422}
    assert [r.path for r in routes if isinstance(r, APIRoute) and r.plan is None] == ["/v1/search/upload"]
