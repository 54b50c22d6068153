"""Qdrant's snapshot endpoints over REST, for the snapshots of a Qdrant server
(``service.store.qdrant_server_snapshots``).

qdrant-client creates, lists and deletes a collection's snapshots, but through its own REST client, whose read
timeout is the store's per-call one (``RAGSERVE_QDRANT__TIMEOUT_S``, 10 s): a server writes a large collection's
archive for longer than that before it answers. And it neither downloads nor uploads a snapshot file as a stream.
This client speaks the same endpoints, built as qdrant-client builds them (the server URL, the ``api-key``
header), with ``RAGSERVE_QDRANT__SNAPSHOT_TIMEOUT_S`` as its read and write timeout::

    GET    /                                                   the server's version (recorded in the manifest)
    GET    /collections/{name}/cluster                         where the collection's shards are
    GET    /collections/{name}/exists
    POST   /collections/{name}/snapshots?wait=true              make one: name, size, sha256
    GET    /collections/{name}/snapshots/{snapshot}             download it (streamed to disk)
    DELETE /collections/{name}/snapshots/{snapshot}?wait=true   delete it from the server's disk
    POST   /collections/{name}/snapshots/upload?priority=snapshot&checksum=...   recover from a file (multipart)
    PATCH  /collections/{name}                                  its metadata (ragserve's settings)

Its errors are the store's: 404 of a collection :class:`CollectionNotFound`, a timeout :class:`StoreTimeout`,
a lost connection or another status :class:`StoreError` (a full disk :class:`StoreFull`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from qdrant_client import models
from qdrant_client.http.exceptions import UnexpectedResponse

from service.store.errors import CollectionNotFound, StoreError, StoreTimeout
from service.store.qdrant_status import status_error

CHUNK_BYTES = 1 << 20


class SnapshotApi:
    def __init__(self, http: httpx.AsyncClient, *, timeout_s: float) -> None:
        self._http = http
        self._timeout_s = timeout_s

    @classmethod
    def open(cls, *, url: str, api_key: str | None, connect_timeout_s: float, timeout_s: float,
             transport: httpx.AsyncBaseTransport | None = None) -> SnapshotApi:
        """``transport`` (tests only) replaces the network edge."""
        headers = {"api-key": api_key} if api_key else {}
        timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s, pool=connect_timeout_s)
        return cls(httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=timeout,
                                     transport=transport), timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def version(self) -> str:
        body = await self._json("GET", "/", None)
        return str(body.get("version", ""))

    async def shards(self, name: str) -> models.CollectionClusterInfo:
        body = await self._json("GET", f"/collections/{_q(name)}/cluster", name)
        return models.CollectionClusterInfo.model_validate(body["result"])

    async def exists(self, name: str) -> bool:
        body = await self._json("GET", f"/collections/{_q(name)}/exists", None)
        return bool(body["result"]["exists"])

    async def create(self, name: str) -> models.SnapshotDescription:
        body = await self._json("POST", f"/collections/{_q(name)}/snapshots", name, params={"wait": "true"})
        return models.SnapshotDescription.model_validate(body["result"])

    async def delete(self, name: str, snapshot: str) -> None:
        await self._json("DELETE", f"/collections/{_q(name)}/snapshots/{_q(snapshot)}", name,
                         params={"wait": "true"})

    async def download(self, name: str, snapshot: str, path: Path) -> str:
        """Stream the snapshot file to ``path`` (synced); its sha256."""
        digest = hashlib.sha256()
        async with self._errors(), self._http.stream("GET", f"/collections/{_q(name)}/snapshots/{_q(snapshot)}") as r:
            if r.status_code != 200:
                await r.aread()
                raise self._status(r, None)
            f = await asyncio.to_thread(open, path, "wb")
            try:
                async for chunk in r.aiter_bytes(CHUNK_BYTES):
                    await asyncio.to_thread(_write, f, digest, chunk)
                await asyncio.to_thread(_sync, f)
            finally:
                f.close()
        return digest.hexdigest()

    async def upload(self, name: str, path: Path, sha256: str) -> None:
        """Recover the collection ``name`` from the snapshot file ``path``, the snapshot's data taken as the truth
        (``priority=snapshot``); Qdrant checks the file against ``sha256`` before it recovers anything."""
        f = await asyncio.to_thread(open, path, "rb")
        try:
            await self._json("POST", f"/collections/{_q(name)}/snapshots/upload", None,
                             params={"wait": "true", "priority": "snapshot", "checksum": sha256},
                             files={"snapshot": (path.name, f, "application/octet-stream")})
        finally:
            f.close()

    async def set_metadata(self, name: str, metadata: dict[str, Any]) -> None:
        await self._json("PATCH", f"/collections/{_q(name)}", name, json={"metadata": metadata})

    # --- one request ---------------------------------------------------------------------------------------

    async def _json(self, method: str, path: str, collection: str | None, **kwargs: Any) -> dict[str, Any]:
        async with self._errors():
            r = await self._http.request(method, path, **kwargs)
        if not r.is_success:
            raise self._status(r, collection)
        try:
            body = r.json()
        except ValueError:
            raise StoreError(f"Qdrant answered {method} {path} with something that is not JSON") from None
        if not isinstance(body, dict):
            raise StoreError(f"Qdrant answered {method} {path} with something ragserve cannot read")
        return body

    @asynccontextmanager
    async def _errors(self) -> AsyncIterator[None]:
        try:
            yield
        except httpx.TimeoutException as exc:
            raise StoreTimeout(f"Qdrant did not answer a snapshot transfer within {self._timeout_s:g}s "
                               "(RAGSERVE_QDRANT__SNAPSHOT_TIMEOUT_S)") from exc
        except httpx.TransportError as exc:
            raise StoreError(f"the connection to Qdrant was lost ({type(exc).__name__})") from exc

    @staticmethod
    def _status(r: httpx.Response, collection: str | None) -> StoreError | CollectionNotFound:
        if r.status_code == 404 and collection is not None:
            return CollectionNotFound(collection)
        return status_error(UnexpectedResponse.for_response(r))  # type: ignore[arg-type]


def _q(segment: str) -> str:
    return quote(segment, safe="")


def _write(f: Any, digest: Any, chunk: bytes) -> None:
    f.write(chunk)
    digest.update(chunk)


def _sync(f: Any) -> None:
    f.flush()
    os.fsync(f.fileno())
