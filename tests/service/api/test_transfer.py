"""Export over HTTP from an app on the embedded store, import over HTTP into an app on the server backend
(qdrant-client's local mode): the same searches answer the same top-10 ids, and the embedding runner (scripted, at
the network edge) saw no request during export and import. Refusals answer their status and code and leave no
collection; an import cut off mid-body resumes when run again, and every point is stored once."""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

import httpx
import numpy as np
from qdrant_client import AsyncQdrantClient

from service.config import Settings
from service.store.types import point_id
from tests.support.app import API_KEY, app_client
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings, vector_base64
from tests.support.server import live_server
from tests.support.waiting import until_async

N = 120
WORDS = ["comet", "orchard", "ferry", "glacier", "lantern", "harbour", "meadow", "quarry", "violin", "walnut"]
QUERIES = ["comet over the harbour", "walnut orchard in the meadow", "violin lantern"]
GZIP = {"Content-Type": "application/gzip"}


def text(i: int) -> str:
    """Words of varied frequency, and a length of its own (filler): no two notes tie in BM25. Engines order tied
    hits by where the points sit in their segments, which an import (in id order) changes."""
    rng = np.random.default_rng(i)
    words = rng.choice(WORDS, size=int(rng.integers(2, 9)), replace=True).tolist()
    fill = 9 * (i % 150) + 8 - len(words)  # 9i + 8 terms in all
    return f"note {i}: " + " ".join(words + [f"filler{i}x{j}" for j in range(fill)])


def documents(n: int) -> list[dict[str, object]]:
    return [{"id": f"doc-{i}", "text": text(i), "metadata": {"n": i, "tag": WORDS[i % 10]},
             "vector_base64": vector_base64(text(i))} for i in range(n)]


def settings(root: Path) -> Settings:
    return scripted_settings(root, qdrant={"edge_process": False})


async def seeded_export(root: Path, runner: ScriptedEmbedder, n: int = N) -> bytes:
    async with app_client(settings(root), transports={"embedding": runner.transport}) as a:
        r = await a.post("/v1/collections", json={"name": "kb", "sparse": True, "filter_fields": {"tag": "keyword"}})
        assert r.status_code == 201, r.text
        r = await a.post("/v1/collections/kb/documents", json={"documents": documents(n)})
        assert r.status_code == 200, r.text
        exported = await a.get("/v1/collections/kb/export")
    assert exported.status_code == 200, exported.text
    assert exported.headers["content-type"] == "application/gzip"
    return exported.content


MODES = {"dense": {"mode": "dense"}, "sparse": {"mode": "sparse"}, "hybrid-dbsf": {"mode": "hybrid", "fusion": "dbsf"},
         "hybrid-rrf": {"mode": "hybrid", "fusion": "rrf"}}


async def top10(client: httpx.AsyncClient, mode: str) -> list[list[object]]:
    """The top-10 ids in order. RRF scores by rank alone, so two hits can tie exactly (1/(k+r1) = w/(k+r2)), and
    engines order tied hits by where the points sit in their segments, which an import (in id order) changes:
    there, the ids of each score in order of the scores, but the last score's (its tie may go on past the tenth hit,
    and each engine cuts it elsewhere). DBSF, which scores by value, carries the exact claim for hybrid."""
    out: list[list[object]] = []
    for q in QUERIES:
        r = await client.post("/v1/search", json={"collection": "kb", "query": q, "top_k": 10, **MODES[mode],
                                                  "rerank": {"enabled": False}})
        assert r.status_code == 200, r.text
        hits = r.json()["hits"]
        if mode != "hybrid-rrf":
            out.append([h["doc_id"] for h in hits])
            continue
        by_score: dict[float, list[str]] = {}
        for h in hits:
            by_score.setdefault(round(h["score"], 6), []).append(h["doc_id"])
        out.append([(score, sorted(ids)) for score, ids in by_score.items()][:-1])
    return out


async def test_export_then_import_into_the_other_backend_answers_the_same_without_embedding(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    transports = {"embedding": runner.transport}
    async with app_client(settings(tmp_path / "a"), transports=transports) as a, \
            app_client(settings(tmp_path / "b"), transports=transports,
                       store_client=AsyncQdrantClient(location=":memory:")) as b:
        r = await a.post("/v1/collections", json={"name": "kb", "sparse": True, "filter_fields": {"tag": "keyword"}})
        assert r.status_code == 201, r.text
        docs = documents(N)
        for d in docs[::2]:
            del d["vector_base64"]  # half of them embedded by the runner, before the transfer
        assert (await a.post("/v1/collections/kb/documents", json={"documents": docs})).status_code == 200
        requests_before = runner.inputs()

        exported = await a.get("/v1/collections/kb/export")
        imported = await b.post("/v1/collections/kb/import", content=exported.content, headers=GZIP)
        requests_after = runner.inputs()

        answers = {side: {m: await top10(c, m) for m in MODES} for side, c in (("a", a), ("b", b))}
        described = [(await c.get("/v1/collections/kb")).json() for c in (a, b)]

    assert exported.status_code == 200 and imported.status_code == 200, imported.text
    assert requests_after == requests_before  # not one /v1/embeddings call during export and import
    assert len(requests_before) > 0
    assert imported.json() | {"export_id": None} == {"collection": "kb", "export_id": None, "points": N, "stored": N,
                                                     "created": True, "resumed": False, "quantization": None}
    assert answers["b"] == answers["a"]
    assert all(len(ids) == 10 for mode in ("dense", "sparse", "hybrid-dbsf") for ids in answers["a"][mode])
    embedded, server = described
    # Only the embedded store builds its own index in the background, and says how far it got: 120 points are far
    # below the build threshold, so all are searched exactly and no build has run.
    assert embedded.pop("index") == {"indexed": 0, "unindexed": N, "build": "idle", "phase": None, "reason": None,
                                     "last_ended": None, "last_built": None, "last_points": None,
                                     "last_seconds": None, "started": None, "progress": None, "eta_s": None,
                                     "waiting_writes": 0}
    assert server.pop("index") is None
    assert server == embedded


async def test_refusals_answer_their_code_and_leave_no_collection(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    data = await seeded_export(tmp_path / "a", runner)
    lines = gzip.decompress(data).split(b"\n")[:-1]

    def with_header(**changes: object) -> bytes:
        header = json.loads(lines[0]) | changes
        return gzip.compress(b"\n".join([json.dumps(header).encode(), *lines[1:]]) + b"\n")

    cases = {
        "truncated": (data[: len(data) // 2], 422, "export_truncated"),
        "flipped": (data[:200] + bytes([data[200] ^ 0xFF]) + data[201:], 422, None),
        "dropped": (gzip.compress(b"\n".join([*lines[:3], *lines[4:]]) + b"\n"), 422, "export_corrupt"),
        "not_json": (gzip.compress(b"\n".join([*lines[:3], b"{oops", *lines[4:]]) + b"\n"), 422, "invalid_export"),
        "not_gzip": (b"\n".join(lines), 422, "export_corrupt"),
        "model": (with_header(model="another/model"), 409, "model_mismatch"),
        "dimensions": (with_header(dimensions=1024), 409, "dimension_mismatch"),
    }
    async with app_client(settings(tmp_path / "b"), transports={"embedding": runner.transport},
                          store_client=AsyncQdrantClient(location=":memory:")) as b:
        answers = {}
        for case, (body, _, _) in cases.items():
            r = await b.post(f"/v1/collections/{case.replace('_', '-')}/import", content=body, headers=GZIP)
            answers[case] = (r.status_code, r.json()["error"]["code"])
        left = [c["name"] for c in (await b.get("/v1/collections")).json()["collections"]]

        assert (await b.post("/v1/collections/kb/import", content=data, headers=GZIP)).status_code == 200
        again = await b.post("/v1/collections/kb/import", content=data, headers=GZIP)
        r = await b.post("/v1/collections", json={"name": "plain", "filter_fields": {"tag": "keyword"}})
        assert r.status_code == 201, r.text
        no_bm25 = await b.post("/v1/collections/plain/import", content=data, headers=GZIP)
        missing = await b.get("/v1/collections/nowhere/export")

    for case, (_, status, code) in cases.items():
        assert answers[case][0] == status, (case, answers[case])
        if code is not None:
            assert answers[case][1] == code, (case, answers[case])
    assert answers["flipped"][1] in ("export_corrupt", "invalid_export")
    assert left == []
    assert (again.status_code, again.json()["error"]["code"]) == (409, "collection_not_empty")
    assert (no_bm25.status_code, no_bm25.json()["error"]["code"]) == (409, "sparse_settings_mismatch")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "collection_not_found")


async def test_an_import_cut_off_mid_body_finishes_when_run_again(tmp_path: Path) -> None:
    """Real HTTP (uvicorn): the client sends two thirds of the file, waits until the server has stored a batch
    and marked the collection importing (searches answer 409), and drops the connection. Running the same import
    again stores every point once."""
    n = 700  # batches of 256: two thirds of the file hold at least one whole batch
    runner = ScriptedEmbedder()
    data = await seeded_export(tmp_path / "a", runner, n)
    auth = {"Authorization": f"Bearer {API_KEY}"}
    with live_server(settings(tmp_path / "b"), transports={"embedding": runner.transport}) as url:
        host, port = url.removeprefix("http://").split(":")
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=120) as client:
            reader, writer = await asyncio.open_connection(host, int(port))
            part = data[: len(data) * 2 // 3]
            writer.write(f"POST /v1/collections/kb/import HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {API_KEY}"
                         f"\r\nContent-Type: application/gzip\r\nContent-Length: {len(data)}\r\n\r\n".encode() + part)
            await writer.drain()

            async def stored_a_batch() -> int:
                r = await client.get("/v1/collections/kb")
                return r.status_code == 200 and r.json()["points"] >= 256  # type: ignore[no-any-return]

            await until_async(stored_a_batch, "the first batch stored", 120)
            while_importing = await client.post("/v1/search", json={"collection": "kb", "query": "comet",
                                                                   "rerank": {"enabled": False}})
            writer.close()  # the connection ends mid-body
            await writer.wait_closed()

            async def rerun() -> httpx.Response | None:
                r = await client.post("/v1/collections/kb/import", content=data, headers=GZIP)
                busy = r.status_code == 409 and r.json()["error"]["code"] == "import_in_progress"
                return None if busy else r  # the first request's handler has not seen the disconnect yet

            finished = await until_async(rerun, "the import run again", 120)
            exported = await client.get("/v1/collections/kb/export")
        del reader

    assert (while_importing.status_code, while_importing.json()["error"]["code"]) == (409, "collection_importing")
    assert finished.status_code == 200, finished.text
    assert {k: finished.json()[k] for k in ("points", "stored", "resumed", "created")} == {
        "points": n, "stored": n, "resumed": True, "created": False}
    ids = [json.loads(line)["id"] for line in gzip.decompress(exported.content).split(b"\n")[1:-2]]
    assert sorted(ids) == sorted(point_id("kb", f"doc-{i}", 0) for i in range(n))
