"""Embedding throughput on the same SciFact chunks, in one run: (a) the vLLM runner's ``/v1/embeddings`` at its
best batch, (b) ragserve's indexing pipeline (an ingest job: parse, chunk, embed, BM25, upsert into the embedded
store), (c) the engines a user would pick instead, each in a subprocess of the peers' own venv
(``tests/bench/peers.py``): sentence-transformers in-process, FastEmbed (ONNX Runtime) and Infinity.

The runner and the pipeline are measured by ``tests/bench/bench_indexing.py`` (two jobs, each between two raw
runs; each job is compared with the better of its two). The peers follow, one at a time, on the same chunk
texts, each again between two raw runs, so that besides the plain ratio (b) / peer there is one at the same
load: ((b) / its raw neighbours) / (peer / its raw neighbours). On a machine that others load, the load of a
minute ago says little about this one's. Tokens are counted once, by ragserve's tokenizer of the same model, for
every engine, and every peer's first vectors are checked against the runner's (cosine).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.config import Settings
from service.profiles import MINILM, QWEN3, EmbeddingModel
from service.runners.launcher import runner_specs, running
from tests.bench import bench_indexing, qwen3_shaped
from tests.bench.results import pyplot, ratio, table
from tests.support.runners import free_port

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".ragserve" / "bench-cache"
PEERS_SCRIPT = Path(__file__).with_name("peers.py")


def run_peer(python: str, spec: dict[str, Any], timeout_s: float = 1200) -> dict[str, Any]:
    """One engine in a subprocess of ``python``; its last stdout line is its JSON result. A failure is a
    result too (``error``), so one engine that cannot run does not lose the others' figures."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    started = time.perf_counter()
    try:
        proc = subprocess.run([python, str(PEERS_SCRIPT), f.name], capture_output=True, text=True,
                              timeout=timeout_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"engine": spec["engine"], "error": f"timed out after {timeout_s:.0f}s"}
    finally:
        Path(f.name).unlink(missing_ok=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"engine": spec["engine"], "error": (proc.stderr or proc.stdout).strip()[-1500:],
                "returncode": proc.returncode}
    result: dict[str, Any] = json.loads(lines[-1])
    result["subprocess_s"] = time.perf_counter() - started
    return result


def onnx_folder(python: str, model_dir: str, name: str) -> tuple[Path | None, dict[str, Any]]:
    """The model exported to ONNX for FastEmbed, once (cached under ``.ragserve/bench-cache/<name>-onnx``)."""
    out = CACHE / f"{name}-onnx"
    if (out / "model.onnx").is_file():
        return out, {"cached": str(out)}
    result = run_peer(python, {"engine": "export-onnx", "model": model_dir, "out": str(out)})
    return (out if "error" not in result else None), result


@contextmanager
def qwen3_runner(window: int, log_dir: Path) -> Iterator[tuple[str, str]]:
    """A vLLM runner (the launcher's own command line, as ``ragserve runners up`` starts it) on the
    Qwen3-0.6B-shaped random checkpoint, built first if needed; yields its URL and the checkpoint folder.
    Prefix caching is off: the raw runner, the job and the raw runner again embed the same chunks, and with it
    on the later ones would be served from the cache the earlier left (an indexing job's chunks are new)."""
    folder = str(qwen3_shaped.build())
    settings = Settings(profile="qwen3", generation={"enabled": False}, runners={
        "embed_url": f"http://127.0.0.1:{free_port()}", "embed_model_path": folder, "max_model_len": window},
        engine={"embed": {"extra_args": ["--no-enable-prefix-caching"]}})
    specs = runner_specs(settings)[:1]
    with running(specs, log_dir=log_dir, timeout_s=900):
        yield specs[0].url, folder


def measure(*, url: str | None, docs: int, peers_python: str | None, infinity_python: str | None,
            model_name: str = "minilm", window: int = 512,
            batches: tuple[int, ...] = (32, 64, 128), inflights: tuple[int, ...] = (1, 2), probe: int = 64,
            peer_batches: tuple[int, ...] = (16, 32, 64), engines: tuple[str, ...] = (
                "sentence-transformers", "fastembed", "infinity")) -> dict[str, Any]:
    """``model_name`` "minilm" (the runner at ``url``) or "qwen3-0.6b" (a runner started here on the
    Qwen3-0.6B-shaped random checkpoint, ``window`` tokens; FastEmbed is skipped for it: its ONNX export
    would be 2.4 GB)."""
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-embed-")))
        if model_name == "minilm":
            assert url is not None
            model, checkpoint, truncate = MINILM.embedding, bench_indexing.default_checkpoint(MINILM.embedding), None
            settings: dict[str, Any] = {"profile": "minilm"}
        else:
            model, truncate = QWEN3.embedding, window
            url, checkpoint = stack.enter_context(qwen3_runner(window, tmp / "logs"))
            settings = {"profile": "qwen3", "runners": {"max_model_len": window, "embed_model_path": checkpoint},
                        "truncate": window}
            engines = tuple(e for e in engines if e != "fastembed")
        return _measure(url, model, checkpoint, truncate, settings, tmp, docs=docs, peers_python=peers_python,
                        infinity_python=infinity_python, batches=batches, inflights=inflights, probe=probe,
                        peer_batches=peer_batches, engines=engines, model_name=model_name)


def _measure(url: str, model: EmbeddingModel, checkpoint: str, truncate: int | None, settings: dict[str, Any],
             tmp: Path, *, docs: int, peers_python: str | None, infinity_python: str | None,
             batches: tuple[int, ...], inflights: tuple[int, ...], probe: int, peer_batches: tuple[int, ...],
             engines: tuple[str, ...], model_name: str) -> dict[str, Any]:
    corpus = bench_indexing.sample_corpus(docs)
    texts, counts = bench_indexing.chunks_of(corpus, model, checkpoint, truncate)
    tokens = sum(counts)
    print(f"embedding: {docs} SciFact documents, {len(texts)} chunks, {tokens:,} tokens ({model_name})", flush=True)
    probe_texts, probe_tokens = texts[:probe], sum(counts[:probe])

    def raw(texts: list[str], tokens: int, batch: int, inflight: int) -> float:
        return asyncio.run(bench_indexing.raw_throughput(url, texts, tokens, batch, inflight, model, truncate))

    raw(texts[:8], sum(counts[:8]), 8, 1)  # warm-up
    grid = {}
    for b in batches:
        for i in inflights:
            grid[(b, i)] = raw(probe_texts, probe_tokens, b, i)
    best = max(grid, key=grid.__getitem__)
    print(f"  raw runner best batch {best[0]} x {best[1]} in flight", flush=True)
    profile = settings.pop("profile")
    # Two jobs, each between two raw runs: on a machine others load, one pair says little.
    lines = corpus.splitlines()
    parts = []
    for half in (lines[: len(lines) // 2], lines[len(lines) // 2:]):
        part = b"\n".join(half) + b"\n"
        part_texts, part_counts = bench_indexing.chunks_of(part, model, checkpoint, truncate)
        parts.append((part, part_texts, sum(part_counts)))
    job = bench_indexing.rounds(url, parts, best, tmp / "data", profile=profile, **settings)
    # Totals over both jobs: time-weighted, as bench_indexing prints them.
    rs = job["rounds"]
    pipe_all = tokens / sum(x["tokens"] / x["pipeline"] for x in rs)
    raw_all = tokens / sum(x["tokens"] / x["raw"] for x in rs)
    raw_mean = tokens / sum(x["tokens"] / ((x["raw_before"] + x["raw_after"]) / 2) for x in rs)
    r = {"raw": raw_all, "pipeline": pipe_all, "ratio": pipe_all / raw_all, "ratio_vs_mean": pipe_all / raw_mean,
         "raw_runs": [x["raw_before"] for x in rs] + [rs[-1]["raw_after"]],
         "job_wall_s": sum(x["job_wall_s"] for x in rs)}
    rows: list[dict[str, Any]] = [
        {"engine": "vLLM /v1/embeddings (a)", "config": f"batch {best[0]} x {best[1]}",
         "tokens_per_s": r["raw"], "docs_per_s": r["raw"] * len(texts) / tokens,
         "note": "each job's better neighbour of raw runs " + " / ".join(f"{v:,.0f}" for v in r["raw_runs"])},
        {"engine": "ragserve pipeline (b)", "config": "ingest job", "tokens_per_s": r["pipeline"],
         "docs_per_s": r["pipeline"] * len(texts) / tokens, "note": f"2 jobs, {r['job_wall_s']:.1f}s end to end"},
    ]
    spec = {"model": checkpoint, "texts": texts, "tokens": tokens, "batches": list(peer_batches), "probe": probe,
            "dims": model.dimensions, "max_seq_length": truncate or model.max_tokens}
    peers: dict[str, Any] = {}
    reference = runner_vectors(url, model, texts[:4], truncate)
    for engine in engines:
        python = infinity_python if engine == "infinity" else peers_python
        if python is None:
            peers[engine] = {"engine": engine, "error": "skipped: no Python given for it"}
            continue
        print(f"  peer: {engine}", flush=True)
        engine_spec = {**spec, "engine": engine}
        if engine == "fastembed":
            folder, export = onnx_folder(python, checkpoint, model_name)
            peers["onnx-export"] = export
            if folder is None:
                peers[engine] = {"engine": engine, "error": f"no ONNX model: {export.get('error')}"}
                continue
            engine_spec["model"] = str(folder)
        raw_before = raw(texts, tokens, *best)  # the runner under the load this peer is about to meet
        peers[engine] = run_peer(python, engine_spec)
        p = peers[engine]
        if "error" in p:
            print(f"    failed: {p['error'][-300:]}", flush=True)
            continue
        p["raw_before_tokens_per_s"] = raw_before
        p["min_cosine_vs_runner"] = min_cosine(p.pop("sample"), reference)
        rows.append({"engine": f"{engine} (c)", "config": f"batch {p['batch']}", "tokens_per_s": p["tokens_per_s"],
                     "docs_per_s": p["docs_per_s"], "cosine": p["min_cosine_vs_runner"], "note": peer_note(p),
                     "raw_neighbour": raw_before})
    raw_end = raw(texts, tokens, *best)
    pipe = r["pipeline"]
    for row in rows:
        row["pipeline_over"] = ratio(pipe, row["tokens_per_s"])
        if "raw_neighbour" in row:
            # The peer against the raw runs just before and after it, and so (b) against the peer at one load:
            # (b / its raw neighbours) / (peer / its raw neighbours).
            after = next((x["raw_neighbour"] for x in rows[rows.index(row) + 1:] if "raw_neighbour" in x), raw_end)
            row["raw_neighbour"] = max(row["raw_neighbour"], after)
            row["over_raw"] = row["tokens_per_s"] / row["raw_neighbour"]
            row["pipeline_over_load_matched"] = r["ratio"] / row["over_raw"]
    return {"scenario": "embedding", "model": model_name, "served_name": model.name, "docs": docs,
            "chunks": len(texts), "tokens": tokens,
            "raw_grid_tokens_per_s": {f"{b}x{i}": v for (b, i), v in grid.items()},
            "best_batch": best[0], "best_inflight": best[1], "job": job, "peers": peers, "rows": rows,
            "raw_end_tokens_per_s": raw_end,
            "ratios": {"pipeline_over_raw": r["ratio"], "pipeline_over_raw_mean": r["ratio_vs_mean"],
                       **{f"pipeline_over_{k}": ratio(pipe, v["tokens_per_s"]) for k, v in peers.items()
                          if "tokens_per_s" in v},
                       **{f"pipeline_over_{row['engine'][:-4]}_load_matched": row["pipeline_over_load_matched"]
                          for row in rows if "pipeline_over_load_matched" in row}}}


def runner_vectors(url: str, model: EmbeddingModel, texts: list[str], truncate: int | None) -> np.ndarray:
    r = httpx.post(f"{url}/v1/embeddings", json={"model": model.name, "input": texts,
                                                 "truncate_prompt_tokens": truncate or model.max_tokens}, timeout=600)
    r.raise_for_status()
    return np.asarray([d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])])


def min_cosine(sample: list[list[float]], reference: np.ndarray) -> float:
    """The lowest cosine between an engine's vectors and the runner's for the same texts (1.0: the same
    embeddings, as a fair throughput comparison needs)."""
    a = np.asarray(sample)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    return float(np.min(np.sum(a * b, axis=1)))


def peer_note(p: dict[str, Any]) -> str:
    threads = p.get("torch_threads", p.get("threads"))
    return f"{p.get('version', '?')}, threads {threads}, load {p.get('load_s', 0):.1f}s"


COLUMNS = [("engine", "engine", ""), ("config", "config", ""), ("docs_per_s", "chunks/s", ",.1f"),
           ("tokens_per_s", "tokens/s", ",.0f"), ("pipeline_over", "(b) / this", ".3f"),
           ("over_raw", "this / (a) beside it", ".3f"), ("pipeline_over_load_matched", "(b) / this, same load", ".3f"),
           ("cosine", "min cos vs (a)", ".5f"), ("note", "note", "")]


def report(result: dict[str, Any]) -> str:
    lines = [f"embedding throughput, {result['model']}: {result['docs']} SciFact documents, {result['chunks']} "
             f"chunks, {result['tokens']:,} tokens", table(result["rows"], COLUMNS)]
    lines.append(f"raw runner once more after the peers: {result['raw_end_tokens_per_s']:,.0f} tokens/s "
                 "(the machine's drift over the run). Each peer runs between two raw runs; 'this / (a) beside it' "
                 "is the peer against the better of them, and '(b) / this, same load' = (b)/(a) over that.")
    for k, v in result["peers"].items():
        if "error" in v:
            lines.append(f"{k}: not measured: {v['error'][-400:]}")
    r = result["ratios"]
    lines.append(f"pipeline / raw runner = {r['pipeline_over_raw']:.3f} (target >= 0.9)")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    colours = ["tab:gray", "tab:blue"] + ["tab:orange"] * (len(rows) - 2)
    bars = ax.barh([r["engine"] for r in rows][::-1], [r["tokens_per_s"] for r in rows][::-1],
                   color=colours[::-1])
    for bar, r in zip(bars, rows[::-1], strict=True):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {r['tokens_per_s']:,.0f} tok/s, {r['docs_per_s']:,.1f} chunks/s", va="center", fontsize=9)
    ax.set_xlim(0, max(r["tokens_per_s"] for r in rows) * 1.45)
    ax.set_xlabel("tokens/s (ragserve's token count for every engine)")
    ax.set_title(f"Embedding throughput, {result['model']}, {result['chunks']} SciFact chunks "
                 f"({result['environment']['cpus']} CPUs)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
