"""Search latency while an ingest job runs: idle p50 against p50 during a job, for the code on ``--code``
(this tree, or another checkout: the code before lanes) and the settings given.

    python -m tests.bench.bench_lanes --runner-url http://127.0.0.1:8103 [--docs 5000] [--rate 4] \\
        [--code /path/to/other/checkout] [--set RAGSERVE_UPSTREAM__BULK_MAX_INFLIGHT=1 ...] [--json out.json]

It starts ``ragserve serve --with-worker`` (minilm profile, embedded store) in its own process on a free port,
seeds a collection, sends searches at a fixed rate (open loop: each on its own, none waits for another) for
``--idle-s`` seconds, then submits a ``--docs``-document JSONL ingest job into a second collection and keeps
searching at the same rate until the job ends. Prints p50/p95/max and status counts for both phases, the
ratio of the p50s and the job's documents per second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from tests.support.runners import free_port

KEY = "bench-key-0123456789abcdef"
WORDS = ("harbours orchards comets lanterns quarries meadows anvils ferries glaciers looms tides kilns beacons "
         "moorings sextants").split()
QUERIES = [f"which note mentions {w}?" for w in WORDS]


def text(i: int, words: int) -> str:
    return f"note {i}: " + " ".join(WORDS[(i * (k + 3)) % len(WORDS)] for k in range(words))


def serve(code: Path, data: Path, runner_url: str, extra: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(code), "RAGSERVE_PROFILE": "minilm", "RAGSERVE_DATA_DIR": str(data),
           "RAGSERVE_API_KEYS": KEY, "RAGSERVE_RUNNERS__EMBED_URL": runner_url, "RAGSERVE_INDEXER__POLL_S": "0.1",
           **extra}
    if (code / "service" / "search" / "query_cache.py").exists():  # the queries repeat: every one must reach the
        env.setdefault("RAGSERVE_QUERY_CACHE__MAX_BYTES", "0")    # runner (older trees refuse the name)
    log = open(data / "serve.log", "wb")  # noqa: SIM115 - the child's
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--with-worker", "--port", str(port)],
                            env=env, cwd=code, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("ragserve did not start: " + (data / "serve.log").read_text()[-2000:])


def summary(latencies: list[float], statuses: Counter[int]) -> dict[str, object]:
    ordered = sorted(latencies)
    pick = (lambda q: round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)) if ordered else None
    return {"n": len(latencies), "p50_ms": round(statistics.median(ordered) * 1000, 1) if ordered else None,
            "p95_ms": pick(0.95) if pick else None, "p99_ms": pick(0.99) if pick else None, "max_ms": round(ordered[-1] * 1000, 1) if ordered else None,
            "statuses": dict(sorted(statuses.items()))}


async def searches(client: httpx.AsyncClient, rate: float, until: asyncio.Future[object] | float, *,
                   queries: list[str] = QUERIES, body: dict[str, object] | None = None,
                   ) -> tuple[list[float], Counter[int]]:
    """Searches at ``rate`` per second (open loop) until ``until`` (a time, or a future done); ``body`` is the
    request without its query (default: collection kb, top 5, no rerank)."""
    body = body or {"collection": "kb", "top_k": 5, "rerank": {"enabled": False}}
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    tasks: set[asyncio.Task[None]] = set()

    async def one(q: str) -> None:
        started = time.monotonic()
        try:
            r = await client.post("/v1/search", json={**body, "query": q})
            statuses[r.status_code] += 1
            if r.status_code == 200:
                latencies.append(time.monotonic() - started)
        except httpx.HTTPError as exc:
            statuses[type(exc).__name__] += 1  # type: ignore[index]

    n = 0
    start = time.monotonic()
    while (not until.done()) if isinstance(until, asyncio.Future) else time.monotonic() < until:
        task = asyncio.create_task(one(queries[n % len(queries)]))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        n += 1
        await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))
    await asyncio.gather(*tasks)
    return latencies, statuses


async def run(args: argparse.Namespace, url: str) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as client:
        for name in ("kb", "bulk"):
            r = await client.post("/v1/collections", json={"name": name})
            assert r.status_code == 201, r.text
        seed = [{"id": f"s{i}", "text": text(100_000 + i, args.words)} for i in range(200)]
        assert (await client.post("/v1/collections/kb/documents", json={"documents": seed})).status_code == 200
        await searches(client, args.rate, time.monotonic() + 3)  # warm up
        idle = await searches(client, args.rate, time.monotonic() + args.idle_s)

        jsonl = "\n".join(json.dumps({"id": f"d{i}", "text": text(i, args.words)}) for i in range(args.docs)).encode()
        r = await client.post("/v1/collections/bulk/ingest", files=[("files", ("docs.jsonl", jsonl))])
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
        started = time.monotonic()

        async def finished() -> dict[str, object]:
            while True:
                job = (await client.get(f"/v1/jobs/{job_id}")).json()
                if job["state"] in ("succeeded", "failed", "cancelled"):
                    return job  # type: ignore[no-any-return]
                await asyncio.sleep(0.5)

        job_task = asyncio.ensure_future(finished())
        busy = await searches(client, args.rate, job_task)
        job = job_task.result()
        took = time.monotonic() - started
    out = {"code": str(args.code), "settings": args.set, "docs": args.docs, "rate_per_s": args.rate,
           "idle": summary(*idle), "during_job": summary(*busy), "job_state": job["state"],
           "job_s": round(took, 1), "docs_per_s": round(args.docs / took, 1)}
    if out["idle"]["p50_ms"] and out["during_job"]["p50_ms"]:  # type: ignore[index]
        out["p50_ratio"] = round(out["during_job"]["p50_ms"] / out["idle"]["p50_ms"], 2)  # type: ignore[index]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runner-url", required=True, help="a MiniLM embedding runner")
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--words", type=int, default=12, help="words per document")
    parser.add_argument("--rate", type=float, default=4.0, help="searches per second")
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--set", action="append", default=[], help="NAME=VALUE environment for the server")
    parser.add_argument("--json", type=Path, default=None, help="append the result as one JSON line")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.set)
    with tempfile.TemporaryDirectory(prefix="bench-lanes-") as tmp:
        proc, url = serve(args.code.resolve(), Path(tmp), args.runner_url, extra)
        try:
            result = asyncio.run(run(args, url))
        finally:
            proc.terminate()
            proc.wait(30)
    print(json.dumps(result))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
