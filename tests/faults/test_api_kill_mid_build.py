"""SIGKILL of ``ragserve serve``'s API process during a background build of the embedded store (issue 38).

A real ``ragserve serve`` on an embedded data folder (its store in a child process), the embedding runner
scripted at the network edge. A low threshold starts a build; the build is held after building its copy and
before catching it up (``RAGSERVE_QDRANT__EDGE_BUILD_HOLD``), and meanwhile documents are added, one replaced
and one deleted, each acknowledged. Then the API process is killed: its store child sees its pipe end and
closes, and the build's copy is given up. Started again on the folder, the service answers, serves the old
shard (nothing indexed, no copy left), and holds exactly the acknowledged documents: every one found by its
own text, the replaced one with its new text only, the deleted one nowhere.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.process import process_tree, ragserve_serve
from tests.support.scripted_embed import ScriptedEmbedder
from tests.support.served_transport import served
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(600)

THRESHOLD = 40


def note(n: int) -> str:
    return f"note number {n}"


def upsert(http: httpx.Client, docs: dict[str, str]) -> None:
    r = http.post("/v1/collections/kb/documents", json={"documents": [{"id": i, "text": t} for i, t in docs.items()]})
    assert r.status_code == 200, r.text


def hits(http: httpx.Client, text: str, top_k: int) -> list[tuple[str, str]]:
    """A dense search for ``text``: the scripted runner gives a text the same vector wherever it is embedded, so
    a document's exact text finds that document first."""
    r = http.post("/v1/search", json={"collection": "kb", "query": text, "mode": "dense", "top_k": top_k,
                                      "rerank": {"enabled": False}})
    assert r.status_code == 200, r.text
    return [(h["doc_id"], h["text"]) for h in r.json()["hits"]]


def index(http: httpx.Client) -> dict[str, Any]:
    r = http.get("/v1/collections/kb")
    assert r.status_code == 200, r.text
    return {"points": r.json()["points"], **r.json()["index"]}


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # exited, not yet reaped by whoever adopted it
    except FileNotFoundError:
        return True


def test_sigkill_of_the_api_mid_build_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    folder, hold = tmp_path / "data", tmp_path / "hold"
    hold.touch()
    env = {"RAGSERVE_QDRANT__EDGE_BUILD_THRESHOLD": str(THRESHOLD), "RAGSERVE_QDRANT__EDGE_BUILD_HOLD": str(hold)}
    expected = {f"doc-{n}": note(n) for n in range(THRESHOLD + 10)}
    shards = folder / "qdrant" / "collections" / "kb"
    with served(runner.transport) as runner_url:
        with ragserve_serve(folder, runner_url, env, with_worker=False) as serve, \
                httpx.Client(base_url=serve.url, headers=serve.headers, timeout=60) as http:
            assert http.post("/v1/collections", json={"name": "kb"}).status_code == 201
            upsert(http, expected)
            held = until(lambda: (i if (i := index(http)).get("phase") == "held" else None),
                         "the build held between its build and its catch-up", 120)
            assert (held["build"], held["points"], held["indexed"]) == ("running", len(expected), 0)
            assert sorted(p.name for p in shards.iterdir() if p.is_dir()) == ["shard", "shard-1"]

            more = {f"doc-{n}": note(n) for n in range(THRESHOLD + 10, THRESHOLD + 20)}
            upsert(http, more)
            upsert(http, {"doc-0": "note zero, rewritten"})
            assert http.delete("/v1/collections/kb/documents/doc-1").status_code == 204
            expected |= more | {"doc-0": "note zero, rewritten"}
            del expected["doc-1"]
            assert index(http)["phase"] == "held"  # all of it during the build

            processes = process_tree(serve.pid)
            os.kill(serve.pid, signal.SIGKILL)
        until(lambda: all(gone(p) for p in processes) or None, "the API's store process exited after it", 60)

        hold.unlink()
        with ragserve_serve(folder, runner_url, env, with_worker=False) as serve, \
                httpx.Client(base_url=serve.url, headers=serve.headers, timeout=60) as http:
            after = index(http)
            assert (after["points"], after["indexed"], after["unindexed"], after["build"]) == (
                len(expected), 0, len(expected), "idle")
            assert sorted(p.name for p in shards.iterdir() if p.is_dir()) == ["shard"]
            for doc_id, text in expected.items():
                assert hits(http, text, 1) == [(doc_id, text)]
            assert ("doc-0", note(0)) not in hits(http, note(0), len(expected))
            assert "doc-1" not in {doc_id for doc_id, _ in hits(http, note(1), len(expected))}
