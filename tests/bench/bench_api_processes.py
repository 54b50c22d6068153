"""Searches per second through 1, 2 and 4 API processes (``ragserve serve --workers N``) against one store
process, and that store process's CPU: is the one store owner the new bottleneck?

    python -m tests.bench.bench_api_processes [--seconds 10] [--concurrency 32] [--docs 2000] [--workers 1,2,4]
        [--mode hybrid|dense|sparse] [--load wrk|httpx]

Each run is a real ``ragserve serve`` on a fresh embedded folder (minilm, 384 dimensions), its embedding runner
scripted at the network edge in this process (tests/support/served_transport.py). ``--workers 1`` is today's
single process with its one-to-one store child; 2 and 4 share one store owner. The collection holds ``--docs``
one-chunk documents; the searches cycle over 8 queries without reranking, so after the first of each per API
process they are answered from that process's query-embedding cache and the runner is out of the way.

The load comes from ``wrk`` where it is installed (``apt-get install wrk``: C, one thread, ``--concurrency``
keep-alive connections, a small share of the cores) or else from ``httpx`` in this process (a new connection per
search, so that the kernel spreads them over the API processes; it takes most of a core itself). Reported:
searches/s, p50, and the CPU seconds per second of the store process (1.0 = one core, its ceiling: its engine
calls hold its GIL), of the API processes together, and of the load generator.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.process import ServeProcess, process_tree, ragserve_serve
from tests.support.scripted_embed import ScriptedEmbedder
from tests.support.served_transport import served

QUERIES = [f"question {i} about the notes" for i in range(8)]
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def roles(serve: ServeProcess) -> tuple[int, list[int]]:
    """(the store process, the API processes) under ``serve``."""
    store, apis = 0, []
    for pid in process_tree(serve.pid):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
        if b"service.store." in cmd:
            store = pid
        elif b"spawn_main" in cmd or (pid == serve.pid and b"--workers" not in cmd):
            apis.append(pid)
    return store, apis


async def seed(serve: ServeProcess, docs: int) -> None:
    async with httpx.AsyncClient(base_url=serve.url, headers=serve.headers, timeout=120) as http:
        (await http.post("/v1/collections", json={"name": "kb"})).raise_for_status()
        for start in range(0, docs, 200):
            batch = [{"id": f"d{i}", "text": f"note {i} on topic {i % 37}"} for i in range(start, min(docs, start + 200))]
            (await http.post("/v1/collections/kb/documents", json={"documents": batch})).raise_for_status()


def search_body(query: str, mode: str) -> dict[str, Any]:
    return {"collection": "kb", "query": query, "mode": mode, "rerank": {"enabled": False}, "top_k": 10}


async def load(serve: ServeProcess, seconds: float, concurrency: int, mode: str) -> tuple[int, list[float], int]:
    latencies: list[float] = []
    failed = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)  # new connections spread the
    async with httpx.AsyncClient(base_url=serve.url, headers=serve.headers, timeout=60, limits=limits) as http:
        end = time.monotonic() + seconds                                          # load over the API processes

        async def one(k: int) -> None:
            nonlocal failed
            i = k
            while time.monotonic() < end:
                t = time.perf_counter()
                r = await http.post("/v1/search", json=search_body(QUERIES[i % len(QUERIES)], mode))
                if r.status_code == 200:
                    latencies.append(time.perf_counter() - t)
                else:
                    failed += 1
                i += 1

        await asyncio.gather(*(one(k) for k in range(concurrency)))
    return len(latencies), latencies, failed


WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %(key)s"
local bodies = %(bodies)s
local i = 0
request = function()
  i = i + 1
  return wrk.format(nil, nil, nil, bodies[i %% #bodies + 1])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"requests": %%d, "failed": %%d, "p50_us": %%d, "p99_us": %%d}\\n',
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


def wrk_load(serve: ServeProcess, seconds: float, concurrency: int, mode: str) -> dict[str, float]:
    """The same searches from ``wrk`` (C, one thread, ``concurrency`` keep-alive connections): a load generator
    that takes a small share of the 2 cores, so the API processes and the store are what limits."""
    bodies = [json.dumps(search_body(q, mode)) for q in QUERIES]
    lua = "{" + ", ".join("[==[" + b + "]==]" for b in bodies) + "}"
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(WRK_SCRIPT % {"key": serve.key, "bodies": lua})
        script.flush()
        done = subprocess.run(["wrk", "-t1", f"-c{concurrency}", f"-d{seconds:g}s", "-s", script.name,
                               f"{serve.url}/v1/search"], check=True, capture_output=True, text=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])  # type: ignore[no-any-return]


def run(workers: int, args: argparse.Namespace, runner_url: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d, ragserve_serve(Path(d) / "data", runner_url, with_worker=False,
                                                            workers=workers) as serve:
        asyncio.run(seed(serve, args.docs))
        asyncio.run(load(serve, 2.0, args.concurrency, args.mode))  # warm-up: every process's query cache, connections
        store, apis = roles(serve)
        before = (cpu_s(store), sum(cpu_s(p) for p in apis), _loadgen_cpu(), time.monotonic())
        if args.load == "wrk":
            out = wrk_load(serve, args.seconds, args.concurrency, args.mode)
            done, failed, p50 = out["requests"], out["failed"], out["p50_us"] / 1000
        else:
            done, latencies, failed = asyncio.run(load(serve, args.seconds, args.concurrency, args.mode))
            p50 = statistics.median(latencies) * 1000
        after = (cpu_s(store), sum(cpu_s(p) for p in apis), _loadgen_cpu(), time.monotonic())
        wall = after[3] - before[3]
        return {"workers": workers, "api_processes": len(apis), "searches_per_s": done / wall, "failed": failed,
                "p50_ms": p50, "store_cpu": (after[0] - before[0]) / wall,
                "api_cpu": (after[1] - before[1]) / wall, "loadgen_cpu": (after[2] - before[2]) / wall}


def _loadgen_cpu() -> float:
    """This process's CPU seconds and its finished children's (``wrk``)."""
    children = os.times()
    return time.process_time() + children.children_user + children.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--mode", choices=("hybrid", "dense", "sparse"), default="hybrid")
    parser.add_argument("--load", choices=("wrk", "httpx"), default="wrk" if shutil.which("wrk") else "httpx",
                        help="the load generator (wrk where it is installed: apt-get install wrk)")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.1f}, load generator: {args.load}")
    print("workers  api procs  searches/s  p50 ms  failed  store CPU  API CPU  load-gen CPU")
    with served(ScriptedEmbedder().transport) as runner_url:
        for workers in (int(w) for w in args.workers.split(",")):
            r = run(workers, args, runner_url)
            print(f"{workers:>7}  {r['api_processes']:>9}  {r['searches_per_s']:>10.0f}  {r['p50_ms']:>6.1f}  "
                  f"{r['failed']:>6}  {r['store_cpu']:>9.2f}  {r['api_cpu']:>7.2f}  {r['loadgen_cpu']:>12.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
