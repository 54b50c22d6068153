"""Run the real app in-process: its lifespan, its middleware, over httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpx
from qdrant_client import AsyncQdrantClient

from service.api.app import create_app
from service.config import Settings
from service.security.fetch import Resolver
from tests.support.waiting import until_async

API_KEY = "test-key-0123456789abcdef"


@asynccontextmanager
async def app_client(
    settings: Settings,
    *,
    transports: Mapping[str, httpx.AsyncBaseTransport] | None = None,
    api_key: str | None = API_KEY,
    with_worker: bool = False,
    resolver: Resolver | None = None,
    store_client: AsyncQdrantClient | None = None,
) -> AsyncIterator[httpx.AsyncClient]:
    """The app's lifespan state is on the client as ``client.services`` (tests that look inside)."""
    app = create_app(settings, transports=transports, with_worker=with_worker, resolver=resolver,
                     store_client=store_client)
    async with app.router.lifespan_context(app) as state:

        async def asgi(scope, receive, send):  # type: ignore[no-untyped-def]
            scope["state"] = dict(state or {})
            await app(scope, receive, send)

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=asgi), base_url="http://ragserve.test", headers=headers, timeout=120
        ) as client:
            client.services = (state or {})["services"]  # type: ignore[attr-defined]
            yield client


async def wait_for_job(client: httpx.AsyncClient, job_id: str, timeout_s: float = 300) -> dict:  # type: ignore[type-arg]
    """Poll a job until it ends (a job record has no event to wait on from outside); its final JSON."""

    async def ended() -> dict | None:  # type: ignore[type-arg]
        r = await client.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        job = r.json()
        return job if job["state"] in ("succeeded", "failed", "cancelled") else None  # type: ignore[no-any-return]

    return await until_async(ended, f"job {job_id} ended", timeout_s, every_s=0.2)
