"""Ingest jobs through the API with the in-process worker, real MiniLM runner and the embedded Qdrant Edge store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.config import Settings
from tests.support.app import app_client, wait_for_job
from tests.support.holding import HoldingTransport
from tests.support.pdf import make_pdf
from tests.support.recording import RecordingTransport
from tests.support.tiers import patient

FILES: dict[str, bytes] = {
    "guide.md": b"# Guide\nHow to use the service.\n\n## Install\nInstall ragserve with pip and start the runners.\n",
    "notes/owls.txt": b"Owls are nocturnal birds of prey with silent flight.",
    "page.html": (b"<html><head><title>Herons</title></head><body><nav>Home | Menu item</nav><article><h1>Herons</h1>"
                  b"<p>The grey heron is a long-legged wading bird that hunts fish in shallow water.</p></article>"
                  b"<footer>Copyright notice</footer></body></html>"),
    "report.pdf": make_pdf(["Quarterly report page one: revenue grew.", "Page two: costs fell sharply."]),
    "corpus.jsonl": b'{"_id": "r1", "title": "Record", "text": "A record about volcanoes."}\n'
                    b'{"_id": "r2", "text": "A record about glaciers."}\n',
}


def _write(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def _embed_calls(recorder: RecordingTransport) -> int:
    return sum(1 for sent, _ in recorder.exchanges if "input" in sent)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    _write(root, FILES)
    return root


@pytest.fixture
def settings(minilm_settings: Settings, folder: Path) -> Settings:
    minilm_settings.ingest.allowed_roots = [folder.parent]
    minilm_settings.indexer.poll_s = 0.05
    return minilm_settings


async def _ingest_path(client: httpx.AsyncClient, folder: Path, **options: object) -> dict:  # type: ignore[type-arg]
    r = await client.post("/v1/collections/docs/ingest", json={"source": {"kind": "path", "path": str(folder)}, **options})
    assert r.status_code == 202, r.text
    assert r.json()["state"] == "queued"
    return await wait_for_job(client, r.json()["id"])


async def _search(client: httpx.AsyncClient, query: str, **kw: object) -> list[dict]:  # type: ignore[type-arg]
    r = await client.post("/v1/search", json={"collection": "docs", "query": query, "top_k": 20, **kw})
    assert r.status_code == 200, r.text
    return r.json()["hits"]  # type: ignore[no-any-return]


async def test_every_format_is_indexed_and_searchable(settings: Settings, folder: Path) -> None:
    async with app_client(settings, with_worker=True) as client:
        await client.post("/v1/collections", json={"name": "docs"})
        job = await _ingest_path(client, folder)
        hits = {h["doc_id"]: h for h in await _search(client, "wading bird hunting fish")}
        pdf_hits = [h for h in await _search(client, "costs fell", filter={"doc_id": "report.pdf"})]
    assert job["state"] == "succeeded", job
    c = job["counts"]
    assert (c["documents_seen"], c["documents_indexed"], c["documents_failed"], c["files_failed"]) == (6, 6, 0, 0)
    assert c["documents_total"] == 6 and job["progress"]["fraction"] == 1.0 and c["tokens"] > 0
    assert set(hits) == {"guide.md", "notes/owls.txt", "page.html", "report.pdf", "r1", "r2"}
    assert next(iter(hits)) == "page.html"
    assert "Menu item" not in hits["page.html"]["text"] and "Copyright" not in hits["page.html"]["text"]
    assert hits["page.html"]["location"]["headings"] == ["Herons"]
    assert {h["location"]["page"] for h in pdf_hits} == {1, 2}
    guide = hits["guide.md"]
    src = FILES["guide.md"]
    loc = guide["location"]
    assert src[loc["byte_start"]:loc["byte_end"]].decode() == guide["text"]


async def test_reindexing_an_unchanged_folder_embeds_nothing(settings: Settings, folder: Path) -> None:
    recorder = RecordingTransport()
    async with app_client(settings, with_worker=True, transports={"embedding": recorder}) as client:
        await client.post("/v1/collections", json={"name": "docs"})
        first = await _ingest_path(client, folder)
        calls_after_first = _embed_calls(recorder)
        points = (await client.get("/v1/collections/docs")).json()["points"]
        second = await _ingest_path(client, folder)
        points_again = (await client.get("/v1/collections/docs")).json()["points"]
    assert first["counts"]["documents_indexed"] == 6 and calls_after_first > 0
    assert _embed_calls(recorder) == calls_after_first  # zero embedding calls the second time
    assert second["counts"]["documents_unchanged"] == 6 and second["counts"]["documents_indexed"] == 0
    assert points == points_again


async def test_changed_file_replaces_its_chunks_and_resync_prunes_deleted(settings: Settings, folder: Path) -> None:
    long_md = "# Long\n" + " ".join(f"alpha{i}" for i in range(600)) + "\n"
    (folder / "long.md").write_text(long_md)
    async with app_client(settings, with_worker=True) as client:
        await client.post("/v1/collections", json={"name": "docs"})
        await _ingest_path(client, folder)
        long_before = await _search(client, "alpha", filter={"doc_id": "long.md"})
        (folder / "long.md").write_text("# Long\nNow a short text about penguins.\n")
        (folder / "notes" / "owls.txt").unlink()
        kept = await _ingest_path(client, folder)  # without prune: the deleted file's document stays
        owls_kept = await _search(client, "owls", filter={"doc_id": "notes/owls.txt"})
        pruned = await _ingest_path(client, folder, prune=True)
        long_after = await _search(client, "penguins", filter={"doc_id": "long.md"})
        owls_after = await _search(client, "owls", filter={"doc_id": "notes/owls.txt"})
        total = (await client.get("/v1/collections/docs")).json()["points"]
    assert len(long_before) > 1  # the long file was chunked
    assert kept["counts"]["documents_indexed"] == 1 and kept["counts"]["documents_deleted"] == 0 and owls_kept
    assert [h["text"] for h in long_after] == ["Now a short text about penguins."]
    assert pruned["counts"]["documents_deleted"] == 1 and owls_after == []
    # guide.md: 2 sections, page.html: 1, report.pdf: 2 pages, r1 and r2: 1 each, long.md: now 1; owls gone
    assert total == 8


async def test_corrupt_pdf_and_invalid_utf8_are_reported_per_file(settings: Settings, folder: Path) -> None:
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\nthis is not a pdf")
    (folder / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (folder / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n....")
    async with app_client(settings, with_worker=True) as client:
        await client.post("/v1/collections", json={"name": "docs"})
        job = await _ingest_path(client, folder)
    assert job["state"] == "succeeded"
    assert job["counts"]["documents_indexed"] == 6 and job["counts"]["files_failed"] == 3
    errors = {e["item"]: e["error"] for e in job["errors"]}
    assert "pdf" in errors["broken.pdf"]
    assert "not valid UTF-8" in errors["latin1.txt"]
    # an image is a document now (read by OCR): a truncated one is that file's error, named as such
    assert errors["picture.png"] == "the PNG image could not be read (SyntaxError: broken PNG file (chunk b''))"


async def test_uploads_multipart(settings: Settings) -> None:
    files = [("files", ("a/one.md", b"# One\nFirst uploaded file.", "text/markdown")),
             ("files", ("two.txt", b"Second uploaded file.", "text/plain"))]
    async with app_client(settings, with_worker=True) as client:
        await client.post("/v1/collections", json={"name": "docs"})
        r = await client.post("/v1/collections/docs/ingest", files=files,
                              data={"options": json.dumps({"source_name": "my-upload", "metadata": {"team": "x"}})})
        assert r.status_code == 202, r.text
        job = await wait_for_job(client, r.json()["id"])
        hits = await _search(client, "uploaded file", filter={"team": "x"})
    assert job["state"] == "succeeded" and job["counts"]["documents_indexed"] == 2
    assert {h["doc_id"] for h in hits} == {"a/one.md", "two.txt"}
    assert not (settings.uploads_dir / job["id"]).exists()  # uploads are dropped once the job ends


async def test_cancel_a_running_job(settings: Settings, tmp_path: Path) -> None:
    big = tmp_path / "docs" / "many"
    _write(big, {f"f{i:04}.txt": f"document number {i} about topic {i % 17}".encode() for i in range(1500)})
    settings.indexer.batch_tokens = 64
    settings.indexer.inflight_batches = 1
    edge = HoldingTransport(hold_at=3)  # one batch in flight at a time: the third waits while the job is cancelled
    async with app_client(settings, transports={"embedding": edge}, with_worker=True) as client:
        await client.post("/v1/collections", json={"name": "docs"})
        r = await client.post("/v1/collections/docs/ingest", json={"source": {"kind": "path", "path": str(big)}})
        job_id = r.json()["id"]
        await asyncio.wait_for(edge.reached.wait(), patient(300))
        deadline = asyncio.get_running_loop().time() + patient(120)
        # the first two batches were answered; their documents are written while the third waits
        while (await client.get(f"/v1/jobs/{job_id}")).json()["counts"]["documents_indexed"] == 0:  # noqa: ASYNC110
            assert asyncio.get_running_loop().time() < deadline, "the answered batches were never written"
            await asyncio.sleep(0.05)  # no event to wait on from outside the worker: its job record
        # The worker learns of a cancel at its next heartbeat (every 5 s); the held batch is released only once
        # it has: released at once, the rest of the job could finish first on a fast machine (it did, 2 runs in 3).
        queue = client.services.jobs  # type: ignore[attr-defined]
        heard = asyncio.Event()
        beat = queue.heartbeat

        async def heartbeat(*args: Any, **kwargs: Any) -> bool:
            cancel = await beat(*args, **kwargs)
            if cancel:
                heard.set()  # the worker sets its own cancel event right after this returns, in the same step
            return bool(cancel)

        queue.heartbeat = heartbeat
        cancel = await client.delete(f"/v1/jobs/{job_id}")
        await asyncio.wait_for(heard.wait(), patient(120))
        edge.release.set()
        job = await wait_for_job(client, job_id)
        points = (await client.get("/v1/collections/docs")).json()["points"]
    assert cancel.status_code == 202 and cancel.json()["cancel_requested"]
    assert job["state"] == "cancelled"
    assert 0 < job["counts"]["documents_indexed"] < 1500
    assert points >= job["counts"]["documents_indexed"] and points < 1500


BAD = [
    ("unknown collection", "/v1/collections/nope/ingest", {"source": {"kind": "path", "path": "/tmp"}}, 404, "collection_not_found"),
    ("path outside allowed roots", "/v1/collections/docs/ingest", {"source": {"kind": "path", "path": "/etc"}}, 403, "path_not_allowed"),
    ("relative path", "/v1/collections/docs/ingest", {"source": {"kind": "path", "path": "docs"}}, 403, "path_not_allowed"),
    ("url not allowlisted", "/v1/collections/docs/ingest", {"source": {"kind": "url", "urls": ["https://example.com/a"]}}, 400, "url_not_allowed"),
    ("file scheme", "/v1/collections/docs/ingest", {"source": {"kind": "url", "urls": ["file:///etc/passwd"]}}, 400, "url_not_allowed"),
    ("unknown kind", "/v1/collections/docs/ingest", {"source": {"kind": "ftp"}}, 422, "validation_error"),
    ("unknown option", "/v1/collections/docs/ingest", {"source": {"kind": "path", "path": "/tmp"}, "bogus": 1}, 422, "validation_error"),
]


@pytest.mark.parametrize(("label", "path", "body", "status", "code"), BAD, ids=[b[0] for b in BAD])
async def test_bad_ingest_requests(settings: Settings, label: str, path: str, body: dict, status: int, code: str) -> None:
    async with app_client(settings) as client:
        await client.post("/v1/collections", json={"name": "docs"})
        r = await client.post(path, json=body)
        jobs = (await client.get("/v1/jobs")).json()["jobs"]
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert jobs == []


async def test_bad_uploads_and_unknown_job(settings: Settings) -> None:
    async with app_client(settings) as client:
        await client.post("/v1/collections", json={"name": "docs"})
        traversal = await client.post("/v1/collections/docs/ingest", files=[("files", ("../evil.txt", b"x", "text/plain"))])
        none = await client.post("/v1/collections/docs/ingest", data={"options": "{}"}, files=[("other", ("a.txt", b"x"))])
        bad_opts = await client.post("/v1/collections/docs/ingest", files=[("files", ("a.txt", b"x"))], data={"options": "{nope"})
        missing = await client.get("/v1/jobs/does-not-exist")
        cancel_missing = await client.delete("/v1/jobs/does-not-exist")
        invalid_json = await client.post("/v1/collections/docs/ingest", content=b"{", headers={"content-type": "application/json"})
    assert traversal.status_code == 422 and traversal.json()["error"]["code"] == "bad_filename"
    assert none.status_code == 422 and none.json()["error"]["code"] == "no_files"
    assert bad_opts.status_code == 400 and bad_opts.json()["error"]["code"] == "invalid_json"
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "job_not_found"
    assert cancel_missing.status_code == 404
    assert invalid_json.status_code == 400 and invalid_json.json()["error"]["code"] == "invalid_json"
    assert not list(settings.uploads_dir.glob("*/evil.txt")) and not (settings.data_dir / "evil.txt").exists()


async def test_a_batch_that_keeps_failing_is_retried_then_recorded_per_document(settings: Settings, tmp_path: Path) -> None:
    """Fault at the network edge: the runner answers 500 to any batch holding the poisoned text."""
    folder = tmp_path / "docs" / "poison"
    _write(folder, {"good1.txt": b"A fine document about rivers.", "bad.txt": b"POISON pill document",
                    "good2.txt": b"Another fine document about lakes."})
    settings.indexer.batch_tokens = 8  # one document per batch
    settings.indexer.batch_attempts = 2
    settings.upstream.retries = 1
    settings.upstream.backoff_s = 0.01
    real = httpx.AsyncHTTPTransport()
    poisoned = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal poisoned
        if b"POISON" in request.content:
            poisoned += 1
            return httpx.Response(500, json={"error": {"message": "boom"}})
        return await real.handle_async_request(request)

    async with real, app_client(settings, with_worker=True, transports={"embedding": httpx.MockTransport(handler)}) as client:
        await client.post("/v1/collections", json={"name": "docs"})
        job = await _ingest_path(client, folder)
        stored = {h["doc_id"] for h in await _search(client, "document", mode="dense")}
    assert job["state"] == "succeeded"
    assert job["counts"]["documents_indexed"] == 2 and job["counts"]["documents_failed"] == 1
    assert poisoned >= 2 * 2  # 2 pipeline attempts x (1 try + 1 client retry), then again once isolated
    (err,) = job["errors"]
    assert err["item"] == "bad.txt" and "not indexed after 2 tries" in err["error"]
    assert stored == {"good1.txt", "good2.txt"}


async def test_url_sources_are_fetched_under_the_fetch_rules(settings: Settings) -> None:
    """URL sources go through the SSRF-safe fetcher: allowlisted names only, resolved addresses checked,
    redirects to other hosts refused per URL while the others index."""
    from tests.support.dns import MapResolver
    from tests.support.origin import Answer, running_origin

    resolver = MapResolver({"docs.example.test": ["127.0.0.1"], "evil.example.test": ["10.0.0.5"]})
    settings.fetch.allowed_domains = ["docs.example.test"]
    settings.fetch.allowed_networks = ["127.0.0.1/32"]
    with running_origin() as origin:
        port = origin.url.rsplit(":", 1)[1]
        base = f"http://docs.example.test:{port}"
        origin.answers["/guide.md"] = Answer(body=b"# Guide\nKayaks are paddled with a double-bladed paddle.\n",
                                             headers={"content-type": "text/markdown"})
        origin.answers["/page"] = Answer(body=FILES["page.html"], headers={"content-type": "text/html"})
        origin.answers["/moved"] = Answer(status=302, headers={"location": f"http://evil.example.test:{port}/x"})
        async with app_client(settings, with_worker=True, resolver=resolver) as client:
            await client.post("/v1/collections", json={"name": "docs"})
            refused = await client.post("/v1/collections/docs/ingest", json={
                "source": {"kind": "url", "urls": [f"http://other.example.test:{port}/a"]}})
            loopback = await client.post("/v1/collections/docs/ingest", json={
                "source": {"kind": "url", "urls": [f"http://127.0.0.1:{port}/guide.md"]}})
            r = await client.post("/v1/collections/docs/ingest", json={
                "source": {"kind": "url", "urls": [f"{base}/guide.md", f"{base}/page", f"{base}/moved"]}})
            assert r.status_code == 202, r.text
            job = await wait_for_job(client, r.json()["id"])
            hits = {h["doc_id"] for h in await _search(client, "paddle a kayak")}
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "url_not_allowed"
    assert loopback.status_code == 400  # a literal address is not an allowlisted name
    assert job["state"] == "succeeded" and job["counts"]["documents_indexed"] == 2, job
    assert hits == {f"{base}/guide.md", f"{base}/page"}
    (err,) = job["errors"]
    assert err["item"] == f"{base}/moved" and "redirect" in err["error"]
    assert sorted(origin.paths()) == ["/guide.md", "/moved", "/page"]  # nothing else was requested
