"""``ragserve index``, ``ragserve search`` (clients of the API) and ``ragserve worker``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from indexer.sources import path_files
from indexer.spec import PathSource

TERMINAL = {"succeeded", "failed", "cancelled"}


def _client(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600)


def _check(r: httpx.Response) -> Any:
    if r.status_code >= 400:
        try:
            err = r.json()["error"]
            raise SystemExit(f"error {r.status_code} {err['code']}: {err['message']}")
        except (ValueError, KeyError):
            raise SystemExit(f"error {r.status_code}: {r.text[:300]}") from None
    return r.json() if r.content else None


def name_prefixes(paths: list[Path]) -> list[str]:
    """Document-id prefixes for several roots indexed side by side: each root's place under the folder that
    holds them all (``docs/``, ``deploy/``), so files of the same name in two roots stay two documents.
    One root keeps ids relative to itself. Roots inside one another are refused."""
    resolved = [p.resolve() for p in paths]
    for i, a in enumerate(resolved):
        for b in resolved[i + 1:]:
            if a == b or a in b.parents or b in a.parents:
                raise SystemExit(f"{a} and {b} overlap: give one or the other")
    if len(resolved) == 1:
        return [""]
    base = Path(os.path.commonpath([p.parent for p in resolved]))
    homes = [p.parent if p.is_file() else p for p in resolved]  # what the source's names are relative to
    return ["" if h == base else h.relative_to(base).as_posix() + "/" for h in homes]


def submit(client: httpx.Client, path: Path, collection: str, *, server_path: bool, options: dict[str, Any],
           include: list[str], exclude: list[str], name_prefix: str = "") -> dict[str, Any]:
    if client.get(f"/v1/collections/{collection}").status_code == 404:
        _check(client.post("/v1/collections", json={"name": collection}))
    source = PathSource(path=str(path.resolve()), include=include or ["**/*"], exclude=exclude,
                        name_prefix=name_prefix)
    options = {"source_name": f"path:{source.path}", **options}
    if server_path:
        job: dict[str, Any] = _check(client.post(f"/v1/collections/{collection}/ingest",
                                                 json={**options, "source": source.model_dump()}))
        return job
    files, problems = [], []
    for item in path_files(source, max_bytes=1 << 62):
        if hasattr(item, "data"):
            files.append(("files", (item.name, item.data, "application/octet-stream")))
        else:
            problems.append(item)
    for p in problems:
        print(f"skipped {p.file}: {p.error}", file=sys.stderr)
    if not files:
        raise SystemExit(f"no files to index under {path}")
    job = _check(client.post(f"/v1/collections/{collection}/ingest", files=files,
                             data={"options": json.dumps(options)}))
    return job


def follow(client: httpx.Client, job_id: str, *, quiet: bool = False, poll_s: float = 0.5) -> dict[str, Any]:
    """Poll the job, drawing a progress line, until it ends."""
    while True:
        job: dict[str, Any] = _check(client.get(f"/v1/jobs/{job_id}"))
        if not quiet:
            print("\r" + _progress_line(job), end="", file=sys.stderr, flush=True)
        if job["state"] in TERMINAL:
            if not quiet:
                print(file=sys.stderr)
            return job
        time.sleep(poll_s)


def _progress_line(job: dict[str, Any]) -> str:
    c, p = job["counts"], job["progress"]
    total = c.get("documents_total")
    done = c["documents_indexed"] + c["documents_unchanged"] + c["documents_failed"]
    frac = p.get("fraction")
    bar = ""
    if frac is not None:
        filled = int(frac * 24)
        bar = "[" + "#" * filled + "-" * (24 - filled) + f"] {frac * 100:5.1f}% "
    rate = f"{p['tokens_per_s']:.0f} tok/s" if p.get("tokens_per_s") else "- tok/s"
    eta = f"ETA {p['eta_s']:.0f}s" if p.get("eta_s") else ""
    return (f"{job['state']:<9} {bar}docs {done}/{total if total is not None else '?'} "
            f"chunks {c['chunks']} {rate} {eta}   ")


def summary(job: dict[str, Any]) -> str:
    c = job["counts"]
    lines = [
        f"job {job['id']}: {job['state']}" + (f" ({job['message']})" if job.get("message") else ""),
        f"  documents: {c['documents_seen']} seen, {c['documents_indexed']} indexed, "
        f"{c['documents_unchanged']} unchanged, {c['documents_failed']} failed, {c['documents_deleted']} deleted",
        f"  chunks: {c['chunks']}, tokens: {c['tokens']}, files failed: {c['files_failed']}",
    ]
    progress = job["progress"]
    if progress.get("elapsed_s"):
        rate = f", {progress['tokens_per_s']:.0f} tokens/s" if progress.get("tokens_per_s") else ""
        lines.append(f"  time: {progress['elapsed_s']:.1f}s{rate}")
    for err in job["errors"][:20]:
        lines.append(f"  ! {err['item']}: {err['error']}")
    if len(job["errors"]) > 20:
        lines.append(f"  ... and {len(job['errors']) - 20} more errors")
    return "\n".join(lines)


def run_worker() -> None:
    """``ragserve worker``: claim and run jobs until SIGTERM or SIGINT, which hand the running job back to
    the queue (``JobQueue.release``) so another worker resumes it at once."""
    import logging
    import signal

    from indexer.worker import Worker
    from service.api.app import build_services
    from service.api.metrics import Metrics
    from service.config import Settings

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings()

    async def main() -> None:
        services = await build_services(settings, Metrics())
        try:
            worker = Worker(services.jobs, services.store, services.embedder, settings, services.fetcher)
            task = asyncio.create_task(worker.run_forever(asyncio.Event()))
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, task.cancel)
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            await services.aclose()

    asyncio.run(main())
