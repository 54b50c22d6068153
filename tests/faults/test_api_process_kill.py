"""SIGKILL of one of ``ragserve serve --workers 2``'s API processes while searches and writes go on: the other keeps
answering, the store owner is untouched, and the store is consistent afterwards.

A real ``ragserve serve --workers 2 --with-worker`` on an embedded data folder (its store owner shared by both API
processes), the embedding runner scripted at the network edge (tests/support/served_transport.py). One thread
writes numbered documents (each acknowledged or not), another searches. The API process that runs the indexing
worker (the pid in ``worker.lock``) is the one killed, once both threads have been answered. Then: searches and
writes keep being answered (the survivor, and the process uvicorn starts in the killed one's place); the owner's pid
is the same; another API process takes the worker's lock and an ingest job submitted afterwards succeeds. Finally
every document whose write was sent without an answer is written again (a write is idempotent): the count is then
exactly the documents sent, and a search for the first and the last acknowledged one finds each.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import httpx
import pytest

from indexer.election import LOCK_NAME
from tests.support.process import ServeProcess, process_tree, ragserve_serve
from tests.support.scripted_embed import ScriptedEmbedder
from tests.support.served_transport import served
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(600)


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def api_processes(serve: ServeProcess) -> list[int]:
    """uvicorn's API processes under ``serve`` (multiprocessing's spawned children)."""
    return [pid for pid in process_tree(serve.pid)[1:] if b"spawn_main" in cmdline(pid)]


def owner(serve: ServeProcess) -> int:
    found = [pid for pid in process_tree(serve.pid)[1:] if b"service.store.owner" in cmdline(pid)]
    assert len(found) == 1, found
    return found[0]


def worker_holder(folder: Path) -> int | None:
    try:
        text = (folder / LOCK_NAME).read_text().split()
    except FileNotFoundError:
        return None
    return int(text[1]) if len(text) == 2 and text[1].isdigit() else None


class Load:
    """Writes of numbered documents and searches, each in its own thread, until :meth:`stop`."""

    def __init__(self, serve: ServeProcess) -> None:
        self.serve = serve
        self.sent: list[int] = []
        self.acked: list[int] = []
        self.searched = 0
        self.refused: list[int] = []  # HTTP answers other than 200: there must be none
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._write), threading.Thread(target=self._search)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def _client(self) -> httpx.Client:
        return httpx.Client(base_url=self.serve.url, headers=self.serve.headers, timeout=60)

    def _write(self) -> None:
        with self._client() as http:
            n = 0
            while not self._stop.is_set():
                self.sent.append(n)
                try:
                    r = http.post("/v1/collections/kb/documents",
                                  json={"documents": [{"id": f"doc-{n}", "text": f"note number {n}"}]})
                except httpx.TransportError:  # sent to the killed process: it may or may not have landed
                    n += 1
                    continue
                if r.status_code == 200:
                    self.acked.append(n)
                else:
                    self.refused.append(r.status_code)
                n += 1

    def _search(self) -> None:
        with self._client() as http:
            while not self._stop.is_set():
                try:
                    r = http.post("/v1/search", json={"collection": "kb", "query": "note number",
                                                      "rerank": {"enabled": False}})
                except httpx.TransportError:
                    continue
                if r.status_code == 200:
                    self.searched += 1
                else:
                    self.refused.append(r.status_code)


def test_sigkill_of_one_api_process_leaves_the_other_serving_and_the_store_consistent(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    folder = tmp_path / "data"
    with served(runner.transport) as runner_url, \
            ragserve_serve(folder, runner_url, workers=2, with_worker=True) as serve, \
            httpx.Client(base_url=serve.url, headers=serve.headers, timeout=60) as http:
        assert http.post("/v1/collections", json={"name": "kb"}).status_code == 201
        apis = until(lambda: (p if len(p := api_processes(serve)) == 2 else None), "two API processes", 60)
        store_owner = owner(serve)
        holder = until(lambda: worker_holder(folder), "one API process holds the worker's lock", 60)
        assert holder in apis

        with Load(serve) as load:
            until(lambda: len(load.acked) >= 5 and load.searched >= 5, "writes and searches answered", 120)
            os.kill(holder, signal.SIGKILL)
            acked, searched = len(load.acked), load.searched
            until(lambda: len(load.acked) >= acked + 20 and load.searched >= searched + 20,
                  "writes and searches answered after the SIGKILL", 120)
            new_holder = until(lambda: (h if (h := worker_holder(folder)) not in (None, holder) else None),
                               "another API process took the worker's lock", 120)

        assert load.refused == []
        assert owner(serve) == store_owner
        assert new_holder in api_processes(serve)
        until(lambda: len(api_processes(serve)) == 2, "uvicorn started an API process in the killed one's place", 60)

        files = [("files", ("after.txt", b"a note written after the SIGKILL", "text/plain"))]
        job = http.post("/v1/collections/kb/ingest", files=files).json()["id"]
        state = until(lambda: (s if (s := http.get(f"/v1/jobs/{job}").json()["state"]) not in ("queued", "running")
                               else None), "the ingest job ended", 120)
        assert state == "succeeded"

        unanswered = sorted(set(load.sent) - set(load.acked))
        for n in unanswered:
            r = http.post("/v1/collections/kb/documents",
                          json={"documents": [{"id": f"doc-{n}", "text": f"note number {n}"}]})
            assert r.status_code == 200
        assert http.get("/v1/collections/kb").json()["points"] == len(load.sent) + 1
        # the scripted runner gives a text the same vector wherever it is embedded: a dense search for a
        # document's exact text finds that document first
        for n in (load.acked[0], load.acked[-1]):
            r = http.post("/v1/search", json={"collection": "kb", "query": f"note number {n}", "mode": "dense",
                                              "rerank": {"enabled": False}, "top_k": 1})
            assert r.status_code == 200
            assert [(h["doc_id"], h["text"]) for h in r.json()["hits"]] == [(f"doc-{n}", f"note number {n}")]
