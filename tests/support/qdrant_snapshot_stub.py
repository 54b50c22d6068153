"""A stand-in for a Qdrant server's snapshot endpoints, at the network edge (``httpx.MockTransport``): no Qdrant
server can run where the tests run, and qdrant-client's local mode has no snapshots.

It answers what :class:`service.store.qdrant_snapshots.SnapshotApi` asks, with archive bytes the test controls,
and records every request (method, path, query, ``api-key`` header, body) so that a test can assert exactly what
was sent. Faults: ``fail_download`` (a status answered instead of the file) and ``drop_download_after`` (the
connection lost after that many bytes of the file), ``announce`` (a size and sha256 other than the file's).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

VERSION = "1.15.1"
PIECE = 256 << 10
"""The download is answered in pieces of this size, as a stream."""


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: dict[str, str]
    api_key: str | None
    body: bytes


@dataclass
class QdrantSnapshotStub:
    archives: dict[str, bytes] = field(default_factory=dict)
    """Collection name -> the bytes its snapshot file holds (a collection the stub has)."""
    remote_shards: dict[str, list[int]] = field(default_factory=dict)
    """Collection name -> shard ids that live on other nodes only."""
    fail_download: int | None = None
    drop_download_after: int | None = None
    announce: tuple[int, str] | None = None
    seen: list[Seen] = field(default_factory=list)
    on_disk: dict[str, set[str]] = field(default_factory=dict)
    """Collection name -> names of the snapshot files the server holds now."""
    uploaded: dict[str, bytes] = field(default_factory=dict)
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def calls(self) -> list[str]:
        return [f"{s.method} {s.path}" for s in self.seen]

    async def handle(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        path = request.url.path
        self.seen.append(Seen(request.method, path, dict(request.url.params), request.headers.get("api-key"), body))
        parts = path.strip("/").split("/")
        if request.method == "GET" and path == "/":
            return _ok({"title": "qdrant - vector search engine", "version": VERSION})
        if parts[0] != "collections" or len(parts) < 2:
            return _error(404, f"no route {path}")
        name = parts[1]
        rest = parts[2:]
        if rest == ["exists"]:
            return _ok({"result": {"exists": name in self.archives}})
        if rest == ["snapshots", "upload"] and request.method == "POST":
            self.uploaded[name] = _multipart_file(request.headers["content-type"], body, "snapshot")
            self.archives[name] = self.uploaded[name]
            return _ok({"result": True})
        if name not in self.archives:
            return _error(404, f"Collection `{name}` doesn't exist!")
        if rest == [] and request.method == "PATCH":
            self.metadata[name] = json.loads(body)["metadata"]
            return _ok({"result": True})
        if rest == ["cluster"]:
            return _ok({"result": self._cluster(name)})
        if rest == ["snapshots"] and request.method == "POST":
            snapshot = f"{name}-{len(self.seen)}-2026-12-05-03-34-22.snapshot"
            self.on_disk.setdefault(name, set()).add(snapshot)
            data = self.archives[name]
            size, checksum = self.announce or (len(data), hashlib.sha256(data).hexdigest())
            return _ok({"result": {"name": snapshot, "creation_time": "2026-12-05T03:34:22", "size": size,
                                   "checksum": checksum}})
        if len(rest) == 2 and rest[0] == "snapshots" and rest[1] in self.on_disk.get(name, set()):
            if request.method == "DELETE":
                self.on_disk[name].discard(rest[1])
                return _ok({"result": True})
            if request.method == "GET":
                if self.fail_download is not None:
                    return _error(self.fail_download, "Service internal error: injected")
                return httpx.Response(200, headers={"content-length": str(len(self.archives[name]))},
                                      content=self._pieces(self.archives[name]))
        return _error(404, f"no route {request.method} {path}")

    def _cluster(self, name: str) -> dict[str, Any]:
        remote = self.remote_shards.get(name, [])
        return {"peer_id": 1, "shard_count": 1 + len(remote),
                "local_shards": [{"shard_id": 0, "points_count": 0, "state": "Active"}],
                "remote_shards": [{"shard_id": s, "peer_id": 2, "state": "Active"} for s in remote],
                "shard_transfers": []}

    async def _pieces(self, data: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(data), PIECE):
            if self.drop_download_after is not None and start >= self.drop_download_after:
                raise httpx.ReadError("injected: the connection was lost")
            yield data[start:start + PIECE]


def _ok(body: dict[str, Any]) -> httpx.Response:
    return httpx.Response(200, json={"status": "ok", "time": 0.0, **body})


def _error(status: int, message: str) -> httpx.Response:
    return httpx.Response(status, json={"status": {"error": message}, "time": 0.0})


def _multipart_file(content_type: str, body: bytes, field_name: str) -> bytes:
    """The bytes of the form field ``field_name`` of a multipart body."""
    boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
    for part in body.split(b"--" + boundary)[1:-1]:
        headers, _, data = part.partition(b"\r\n\r\n")
        if f'name="{field_name}"'.encode() in headers:
            assert data.endswith(b"\r\n")
            return data[:-2]
    raise AssertionError(f"no field {field_name!r} in the multipart body")
