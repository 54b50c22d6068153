"""``ragserve index`` (through :class:`service.client.Client`) and ``ragserve worker``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from service.client import Client, Job


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


def submit(client: Client, path: Path, collection: str, *, server_path: bool, options: dict[str, Any],
           include: list[str], exclude: list[str], name_prefix: str = "") -> Job:
    """Create the collection when missing and submit one ingest job for ``path`` (without waiting)."""
    client.ensure_collection(collection)
    try:
        return client.ingest_path(collection, path, server_path=server_path, include=include, exclude=exclude,
                                  name_prefix=name_prefix, options=options, wait=False,
                                  on_skip=lambda name, why: print(f"skipped {name}: {why}", file=sys.stderr))
    except ValueError as exc:  # nothing readable under the path
        raise SystemExit(str(exc)) from None


def follow(client: Client, job_id: str, *, quiet: bool = False, poll_s: float = 0.5) -> Job:
    """Poll the job, drawing a progress line, until it ends."""
    def draw(job: Job) -> None:
        print("\r" + _progress_line(job), end="", file=sys.stderr, flush=True)

    job = client.wait_for_job(job_id, progress=None if quiet else draw, poll_s=poll_s)
    if not quiet:
        print(file=sys.stderr)
    return job


def _progress_line(job: Job) -> str:
    c, p = job.counts, job.progress
    total = c.documents_total
    done = c.documents_indexed + c.documents_unchanged + c.documents_failed
    bar = ""
    if p.fraction is not None:
        filled = int(p.fraction * 24)
        bar = "[" + "#" * filled + "-" * (24 - filled) + f"] {p.fraction * 100:5.1f}% "
    rate = f"{p.tokens_per_s:.0f} tok/s" if p.tokens_per_s else "- tok/s"
    eta = f"ETA {p.eta_s:.0f}s" if p.eta_s else ""
    return (f"{job.state:<9} {bar}docs {done}/{total if total is not None else '?'} "
            f"chunks {c.chunks} {rate} {eta}   ")


def summary(job: Job) -> str:
    c = job.counts
    lines = [
        f"job {job.id}: {job.state}" + (f" ({job.message})" if job.message else ""),
        f"  documents: {c.documents_seen} seen, {c.documents_indexed} indexed, "
        f"{c.documents_unchanged} unchanged, {c.documents_failed} failed, {c.documents_deleted} deleted",
        f"  chunks: {c.chunks}" + (f" ({c.chunks_truncated} cut to the model's window)" if c.chunks_truncated else "")
        + f", tokens: {c.tokens}, files failed: {c.files_failed}",
    ]
    if job.progress.elapsed_s:
        rate = f", {job.progress.tokens_per_s:.0f} tokens/s" if job.progress.tokens_per_s else ""
        lines.append(f"  time: {job.progress.elapsed_s:.1f}s{rate}")
    for err in job.errors[:20]:
        lines.append(f"  ! {err.item}: {err.error}")
    if len(job.errors) > 20:
        lines.append(f"  ... and {len(job.errors) - 20} more errors")
    return "\n".join(lines)


def run_worker() -> None:
    """``ragserve worker``: claim and run jobs until SIGTERM or SIGINT, which hand the running job back to
    the queue (``JobQueue.release``) so another worker resumes it at once."""
    import gc
    import logging
    import signal

    from indexer.services import open_worker_services
    from indexer.worker import Worker
    from service.config import Settings

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings()

    async def main() -> None:
        services = await open_worker_services(settings)
        gc.collect()
        gc.freeze()  # start-up's objects out of every full collection (see service.api.app.freeze_startup_objects)
        try:
            worker = Worker(services.jobs, services.store, services.embedder, settings, services.fetcher,
                            services.generator)
            task = asyncio.create_task(worker.run_forever(asyncio.Event()))
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, task.cancel)
            with contextlib.suppress(asyncio.CancelledError):
                await task
        finally:
            await services.aclose()

    asyncio.run(main())
