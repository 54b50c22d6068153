"""SIGKILL of the API process in the middle of an import, then the same import again: every point present once.

A real ``ragserve serve`` (tests/support/process.py, its embedded store in a child process of its own, as deployed)
on an embedded data folder, its embedding runner scripted at the network edge (tests/support/served_transport.py).
The import's body is sent up to two thirds; once the API counts stored points (mid-import by construction: the
rest of the body has not been sent), the API process is killed with SIGKILL. Its store child sees its pipe close,
flushes and exits by itself (the test waits for that: the new server needs the folder's lock). A new server on the
same folder finds the collection still marked as importing (a search answers 409 ``collection_importing``), holding
at least every point the first one had counted; the same import run again finishes it: every exported id once,
each with the source's payload and vectors, the source's int8 quantization recorded, the mark gone, and not one
embedding request made by either import (the only request the runner saw is the final search's query).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from service.profiles import MINILM
from service.sparse.config import SparseConfig
from service.store.edge import EdgeStore
from service.store.edge_optimize import optimize_collection
from service.store.types import Chunk, SparseVector
from service.transfer.exporter import start_export
from tests.support.process import ServeProcess, process_tree, ragserve_serve
from tests.support.scripted_embed import ScriptedEmbedder
from tests.support.served_transport import served
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(600)

N = 3000
DIM = MINILM.embedding.dimensions  # the served profile's: an import checks the file's dimensions against it
MODEL = MINILM.embedding.name
QUERY = "a ferry over the glacier"
GZIP = {"Content-Type": "application/gzip"}
VECTORS = np.random.default_rng(19).normal(size=(N, DIM)).astype(np.float32)


def chunk(i: int) -> Chunk:
    return Chunk(f"doc-{i // 2}", i % 2, f"point {i} of the source", {"n": i, "tag": ["a", "b", "c"][i % 3]},
                 content_hash=f"h{i // 2}", chunk_count=2, source=f"src{i % 5}")


def sparse(i: int) -> SparseVector | None:
    """Every fifth point without a BM25 vector: the import's batches mix both."""
    if i % 5 == 0:
        return None
    return SparseVector([i % 97, 100 + i % 89, 300 + i % 13], [1.0, 0.5, 0.25])


async def source_export(root: Path) -> bytes:
    """The export of a collection that ``ragserve optimize --int8`` quantized (with its store closed, as it needs)."""
    store = await EdgeStore.open(root)
    try:
        await store.create_collection("kb", dimensions=DIM, model=MODEL, filter_fields={"tag": "keyword"},
                                      sparse=SparseConfig())
        await store.upsert("kb", [chunk(i) for i in range(N)], VECTORS, [sparse(i) for i in range(N)])
    finally:
        await store.aclose()
    optimize_collection(root, "kb", quantization="int8", progress=lambda _: None)
    store = await EdgeStore.open(root)
    try:
        return b"".join([piece async for piece in await start_export(store, "kb")])
    finally:
        await store.aclose()


def points(export: bytes) -> dict[str, tuple[dict[str, Any], np.ndarray, Any]]:
    """Every point of an export file by id: its payload fields, its dense vector, its sparse vector (as written)."""
    out = {}
    for line in gzip.decompress(export).splitlines()[1:-1]:
        p = json.loads(line)
        pid, dense, bm25 = p.pop("id"), p.pop("dense"), p.pop("sparse")
        assert pid not in out, f"{pid} twice in one export"
        out[pid] = (p, np.frombuffer(base64.b64decode(dense), "<f4"), bm25)
    return out


def send_part(url: str, key: str, data: bytes, part: bytes) -> socket.socket:
    """An import request whose body (announced whole) stops after ``part``: the server waits for the rest."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    head = (f"POST /v1/collections/kb/import HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/gzip\r\nContent-Length: {len(data)}\r\n\r\n")
    sock.sendall(head.encode() + part)
    return sock


def store_child(api: ServeProcess) -> int:
    """The pid of the API's embedded-store process (``python -m service.store.child``)."""
    children = []
    for pid in process_tree(api.pid)[1:]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"service.store.child" in f.read():
                    children.append(pid)
        except FileNotFoundError:
            continue
    assert len(children) == 1, children
    return children[0]


def ended(pid: int) -> bool:
    """The process is gone, or a zombie (it has exited and closed its files, its lock's among them; whoever
    adopted it has not reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def stored(http: httpx.Client) -> int:
    r = http.get("/v1/collections/kb")
    return int(r.json()["points"]) if r.status_code == 200 else 0


def test_sigkill_of_the_api_mid_import_then_the_same_import_stores_every_point_once(tmp_path: Path) -> None:
    data = asyncio.run(source_export(tmp_path / "source"))
    source = points(data)
    assert sorted(source) == sorted(chunk(i).id_in("kb") for i in range(N))
    runner = ScriptedEmbedder()
    folder = tmp_path / "data"
    with served(runner.transport) as runner_url:
        with ragserve_serve(folder, runner_url, with_worker=False) as first, \
                httpx.Client(base_url=first.url, headers=first.headers, timeout=120) as http:
            sock = send_part(first.url, first.key, data, data[: len(data) * 2 // 3])
            counted = until(lambda: stored(http), "points of the import stored", 120)
            child = store_child(first)
            os.kill(first.pid, signal.SIGKILL)
            until(lambda: ended(child), "the store process ended after its parent's SIGKILL", 120)
            sock.close()

        with ragserve_serve(folder, runner_url, with_worker=False) as second, \
                httpx.Client(base_url=second.url, headers=second.headers, timeout=120) as http:
            search = {"collection": "kb", "query": QUERY, "rerank": {"enabled": False}}
            while_marked = http.post("/v1/search", json=search)
            after_restart = stored(http)
            finished = http.post("/v1/collections/kb/import", content=data, headers=GZIP)
            exported = http.get("/v1/collections/kb/export")
            searched = http.post("/v1/search", json=search)

    assert (while_marked.status_code, while_marked.json()["error"]["code"]) == (409, "collection_importing")
    assert 0 < counted <= after_restart < N  # what was stored before the kill survived it; the rest never came
    assert finished.status_code == 200, finished.text
    assert {k: finished.json()[k] for k in ("points", "stored", "resumed", "created", "quantization")} == {
        "points": N, "stored": N, "resumed": True, "created": False, "quantization": "int8"}
    assert exported.status_code == 200, exported.text  # an export is refused (409) while the mark is there
    target = points(exported.content)
    assert sorted(target) == sorted(source)
    for pid, (payload, dense, bm25) in source.items():
        # Bit for bit: the same engine on both sides leaves a vector that is already unit as it is.
        assert (target[pid][0], target[pid][1].tobytes(), target[pid][2]) == (payload, dense.tobytes(), bm25), pid
    assert searched.status_code == 200, searched.text
    assert runner.inputs() == [(QUERY,)]  # the search's query, and nothing from either import
