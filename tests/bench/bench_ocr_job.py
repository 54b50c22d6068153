"""What OCR costs a whole indexing job, and what searches see while it runs: a ``--pages``-page scanned PDF
against its text-layer twin, each uploaded to a job of its own, embedding included (issue 21).

    python -m tests.bench.bench_ocr_job --embed-url http://127.0.0.1:8101 --profile minilm [--pages 100]
        [--json ocr-job.json]

The app runs in this process with its indexing worker (as ``ragserve serve`` runs them), the embedded store
in a temporary folder (its own process) and the embedding runner at ``--embed-url``. A small collection of
short notes is indexed first; then, for the twin and for the scan in turn, one search at a time runs against
that collection (dense, no rerank, the query cache off: every search embeds) for as long as the job runs, and
once more for ``--idle-searches`` searches with nothing indexing. Printed (and written to ``--json``): each
job's seconds, pages/s and chunks, and search round trips (p50 / p90 / p99 / max) idle and during each job.
Pages as in :mod:`tests.bench.bench_ocr` (40 lines of 12-point type on a US Letter page at 300 dpi), each with
its own header and order of lines (:func:`page_texts`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from service.config import Settings
from tests.bench.bench_ocr import LINES
from tests.bench.results import environment
from tests.bench.synthetic import summarize
from tests.support.app import API_KEY, app_client, wait_for_job
from tests.support.ocr_pages import image_pdf, text_page
from tests.support.pdf import make_pdf

WORDS = ("harbor", "ledger", "copper", "meadow", "signal", "orbit", "violin", "protein", "river", "lantern")


def page_texts(pages: int) -> list[tuple[str, ...]]:
    """Each page its own text (a header and the 40 lines in an order of its own): identical pages would make
    identical chunks, which the pipeline embeds once, and the job would cost no embedding at all."""
    out = []
    for i in range(pages):
        lines = list(LINES)
        random.Random(i).shuffle(lines)
        out.append((f"Page {i + 1} of the harbor records.", *lines[:39]))
    return out


def settings_for(data_dir: Path, args: argparse.Namespace) -> Settings:
    values: dict[str, Any] = {"data_dir": data_dir, "api_keys": [API_KEY], "query_cache": {"max_bytes": 0},
                              "generation": {"enabled": False}, "indexer": {"poll_s": 0.05},
                              "ingest": {"max_file_bytes": 200_000_000},  # the 100-page scan is 83 MB
                              "ocr": {"workers": args.workers}}
    if args.profile:
        values["profile"] = args.profile
    if args.embed_url:
        values["runners"] = {"embed_url": args.embed_url}
    return Settings(**values)


async def searches_until(client: httpx.AsyncClient, done: asyncio.Event | None, n: int = 0) -> list[float]:
    """Round-trip milliseconds of one search at a time: until ``done`` is set, or ``n`` of them."""
    out: list[float] = []
    i = 0
    while (done is not None and not done.is_set()) or (done is None and i < n):
        query = f"{WORDS[i % 10]} {WORDS[i // 10 % 10]} note {i}"
        t = time.perf_counter()
        r = await client.post("/v1/search", json={"collection": "notes", "query": query, "top_k": 5,
                                                  "mode": "dense", "rerank": {"enabled": False}})
        out.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 200, r.text
        i += 1
        await asyncio.sleep(0.05)
    return out


async def job_with_searches(client: httpx.AsyncClient, name: str, data: bytes) -> dict[str, Any]:
    r = await client.post("/v1/collections", json={"name": name})
    assert r.status_code == 201, r.text
    done = asyncio.Event()
    search = asyncio.create_task(searches_until(client, done))
    started = time.perf_counter()
    r = await client.post(f"/v1/collections/{name}/ingest",
                          files=[("files", (f"{name}.pdf", data, "application/pdf"))])
    assert r.status_code == 202, r.text
    job = await wait_for_job(client, r.json()["id"], timeout_s=3600)
    seconds = time.perf_counter() - started
    done.set()
    during = await search
    assert job["state"] == "succeeded", job
    return {"seconds": round(seconds, 2), "chunks": job["counts"]["chunks"],
            "counts": job["counts"], "searches_during_ms": summarize(during), "searches_during": len(during)}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    texts = page_texts(args.pages)
    scanned = image_pdf([text_page(t, width_in=8.5, margin_in=0.75) for t in texts])
    twin = make_pdf([" ".join(t) for t in texts])
    notes = [{"id": f"n{i}", "text": f"note {i}: {WORDS[i % 10]} {WORDS[i // 10 % 10]} {WORDS[i // 100 % 10]}"}
             for i in range(200)]
    out: dict[str, Any] = {"scenario": "ocr-job", "pages": args.pages, "workers": args.workers,
                           "scanned_pdf_bytes": len(scanned), "twin_pdf_bytes": len(twin)}
    with tempfile.TemporaryDirectory(prefix="bench-ocr-job-") as tmp:
        settings = settings_for(Path(tmp), args)
        out["profile"] = settings.profile
        async with app_client(settings, with_worker=True) as client:
            assert (await client.post("/v1/collections", json={"name": "notes"})).status_code == 201
            r = await client.post("/v1/collections/notes/documents", json={"documents": notes})
            assert r.status_code == 200, r.text
            await searches_until(client, None, 10)  # warm-up
            out["idle_ms"] = summarize(await searches_until(client, None, args.idle_searches))
            print(f"idle searches: {out['idle_ms']}", flush=True)
            out["text_layer"] = await job_with_searches(client, "twin", twin)
            print(f"text-layer twin: {out['text_layer']}", flush=True)
            out["scanned"] = await job_with_searches(client, "scan", scanned)
            print(f"scanned: {out['scanned']}", flush=True)
    for kind in ("text_layer", "scanned"):
        out[kind]["pages_per_s"] = round(args.pages / out[kind]["seconds"], 3)
    out["scan_over_twin"] = round(out["scanned"]["seconds"] / out["text_layer"]["seconds"], 1)
    out["environment"] = environment()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--embed-url", help="the embedding runner (default: RAGSERVE_RUNNERS__EMBED_URL)")
    parser.add_argument("--profile", help="the model profile (default: RAGSERVE_PROFILE)")
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="OCR worker processes")
    parser.add_argument("--idle-searches", type=int, default=100)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    out = asyncio.run(measure(args))
    print(json.dumps({k: v for k, v in out.items() if k != "environment"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
