"""A burst of single-text embeddings over a pool of MiniLM replicas on this host's cores, with the runners' quiet
wait hook on and off (``RAGSERVE_RUNNERS__CPU_QUIET_WAIT``, service/runners/quiet_wait/sitecustomize.py).

    python -m tests.bench.bench_pool_burst [--replicas 3] [--rounds 8] [--quiet-wait on,off] [--plan vllm]
        [--json out.json]

For each setting it starts ``--replicas`` MiniLM runners through the launcher (``--plan``: the tests' placement,
``vllm``, puts every worker on core 0; the soak's pool test runs three so), routes bursts of 240 texts, 24 in flight,
through the pool client (fewest in flight), and prints each burst's split over the replicas, p50, p95 and rate.
The same burst as the soak's ``pool.burst_*`` figures (tests/service/upstream/test_pool_minilm.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from service.config import Settings
from service.profiles import MINILM
from service.runners.launcher import runner_specs, running
from service.upstream.embeddings import EmbeddingClient
from service.upstream.runner import RunnerClient
from tests.support.runners import free_port

BURST, CONCURRENCY = 240, 24
TEXTS = [f"passage {i}: the {w} of the river at dawn" for i, w in
         enumerate(["colour", "sound", "speed", "depth", "width", "smell"] * (BURST // 6))]


async def _burst(embedder: EmbeddingClient) -> list[float]:
    gate, seconds = asyncio.Semaphore(CONCURRENCY), [0.0] * BURST

    async def one(i: int) -> None:
        async with gate:
            started = time.monotonic()
            await embedder.embed_batch([TEXTS[i]], lane="query")
            seconds[i] = time.monotonic() - started

    await asyncio.gather(*(one(i) for i in range(BURST)))
    return seconds


async def _rounds(urls: list[str], rounds: int) -> list[dict[str, Any]]:
    runner = RunnerClient("embedding", ",".join(urls), timeout_s=60, max_concurrency=32, backoff_s=0.05,
                          probe_interval_s=0.5, health_interval_s=1.0)
    embedder = EmbeddingClient(runner, MINILM.embedding)
    await _burst(embedder)  # warm-up, not counted
    out = []
    for _ in range(rounds):
        before = {s.url: s.chosen for s in runner.replica_stats()}
        started = time.monotonic()
        seconds = await _burst(embedder)
        wall = time.monotonic() - started
        out.append({"routed": [s.chosen - before[s.url] for s in runner.replica_stats()],
                    "p50_ms": round(float(np.percentile(seconds, 50)) * 1000, 1),
                    "p95_ms": round(float(np.percentile(seconds, 95)) * 1000, 1), "rps": round(BURST / wall, 1)})
        await asyncio.sleep(2)  # past vLLM's 1 s spin after the burst: each burst starts from idle readers
    await runner.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--quiet-wait", default="on,off")
    parser.add_argument("--plan", default="vllm", choices=["auto", "shared", "split", "vllm"])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results = []
    for quiet in args.quiet_wait.split(","):
        urls = [f"http://127.0.0.1:{free_port()}" for _ in range(args.replicas)]
        settings = Settings(profile="minilm", runners={"embed_url": ",".join(urls), "cpu_plan": args.plan,
                                                       "cpu_quiet_wait": quiet == "on"})
        with running(runner_specs(settings, MINILM), log_dir=Path(tempfile.mkdtemp(prefix="bench-pool-")),
                     timeout_s=900):
            rows = asyncio.run(_rounds(urls, args.rounds))
        for row in rows:
            print(f"quiet wait {quiet:<3} routed {row['routed']}: p50 {row['p50_ms']:.0f} ms, p95 "
                  f"{row['p95_ms']:.0f} ms, {row['rps']} requests/s", flush=True)
        p95s, rps = [r["p95_ms"] for r in rows], [r["rps"] for r in rows]
        print(f"quiet wait {quiet}: median p95 {np.median(p95s):.0f} ms, median rate {np.median(rps):.1f}/s",
              flush=True)
        results.append({"quiet_wait": quiet == "on", "plan": args.plan, "replicas": args.replicas, "rows": rows})
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
