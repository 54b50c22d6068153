"""``/v1/search`` through the real API on a large collection, beside numpy brute force on the same matrix.

    python -m tests.bench.bench_api_search [--points 100000] [--json api-search.json] [--plot api-search.png]
        [--embed-url http://127.0.0.1:18101] [--rerank-url http://127.0.0.1:18102] [--py-spy DIR]

Needs the qwen3 profile's embedding and reranker runners already up (the tiny random Qwen3 checkpoint of
``tests/support/tiny_qwen3.py`` serves 1024-dimensional vectors; ``--max-model-len`` as they were started).
It starts ``ragserve serve`` (uvicorn on loopback, embedded Qdrant Edge store in a temporary folder) in its
own process, so this load generator never shares the server's GIL, and then:

1. fills a collection with ``--points`` structured vectors (cluster centres plus noise, see
   ``tests/bench/synthetic.py``) and short texts (so BM25 vectors exist) through
   ``POST /v1/collections/{name}/documents`` with precomputed vectors, ``--batch`` a request (docs/s), while
   a probe pings ``/health`` (an event loop that stalls shows up there);
2. concurrency 1: ``--queries`` searches for each of dense / hybrid x rerank off / on, per-stage p50 from
   the response's ``timings_ms`` (embed, search, rerank, total);
3. numpy brute force (float32 ``matrix @ q`` + argpartition, top 10) on the same matrix with the same query
   vectors (asked of the embedding runner as the API asks), timed right after each of those searches (without
   rerank), so both see the same machine load; and recall@10 of the API's dense hits against it;
4. concurrency ``--concurrency`` (32) for ``--duration`` seconds each, dense and hybrid, no rerank: p50 / p99 /
   errors / throughput.

Targets (issue 8): hybrid search stage p50 <= 2 x numpy dense; at concurrency 32 no errors and p99 <= 3 x p50.
With ``--py-spy DIR`` the server is sampled by py-spy during the prefill and each concurrent run (raw
collapsed stacks, one file per phase; ``py-spy`` must be installed in the venv).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.profiles import QWEN3
from tests.bench.synthetic import HealthProbe, prefill, prefill_doc_id, py_spy, summarize, synthetic_corpus
from tests.support.runners import free_port

ROOT = Path(__file__).resolve().parents[2]
KEY = "bench-key-0123456789abcdef"
COLLECTION = "bench"
STAGES = ("embed", "search", "rerank", "total")
CONFIGS = [("dense", False), ("dense", True), ("hybrid", False), ("hybrid", True)]


# --- the server ----------------------------------------------------------------------------------------


@contextmanager
def api_process(data_dir: Path, *, embed_url: str, rerank_url: str, max_model_len: int,
                log_path: Path, with_worker: bool = False,
                env_extra: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``ragserve serve`` (qwen3 profile, generation off, embedded store under ``data_dir``) on a free
    loopback port (``with_worker``: and its indexing worker; ``env_extra``: more settings); yields its base URL
    and process."""
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "RAGSERVE_PROFILE": "qwen3", "RAGSERVE_API_KEYS": KEY, "RAGSERVE_DATA_DIR": str(data_dir),
        "RAGSERVE_HOST": "127.0.0.1", "RAGSERVE_PORT": str(port),
        "RAGSERVE_RUNNERS__EMBED_URL": embed_url, "RAGSERVE_RUNNERS__RERANK_URL": rerank_url,
        "RAGSERVE_RUNNERS__MAX_MODEL_LEN": str(max_model_len), "RAGSERVE_GENERATION__ENABLED": "false",
        # The pipeline uncached: these benches repeat queries, which the query cache would answer without the
        # runner (tests/bench/bench_query_cache.py measures the cache).
        "RAGSERVE_QUERY_CACHE__MAX_BYTES": "0",
        **(env_extra or {}),
    }
    env.pop("RAGSERVE_QDRANT__URL", None)
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", *(["--with-worker"] if with_worker else [])],
                            cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ragserve serve exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"ragserve serve did not answer /health:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


# --- the phases ----------------------------------------------------------------------------------------


def search_body(query: str, mode: str, rerank: bool, top_k: int = 10) -> dict[str, Any]:
    return {"collection": COLLECTION, "query": query, "top_k": top_k, "mode": mode, "rerank": {"enabled": rerank}}


def sequential(client: httpx.Client, queries: list[str], mode: str, rerank: bool, warmup: int = 5,
               after: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Concurrency 1: per-stage timings from each response, the client's round trip, the hits' doc ids.
    ``after(i)`` runs after the i-th search (numpy brute force on the same query, timed in step with it).
    A failed search is counted with its status and error code, and the run goes on."""
    for q in queries[:warmup]:
        client.post("/v1/search", json=search_body(q, mode, rerank))
    stages: dict[str, list[float]] = {s: [] for s in STAGES}
    rtt: list[float] = []
    hits: dict[int, list[str]] = {}
    errors: list[dict[str, Any]] = []
    for i, q in enumerate(queries):
        t = time.perf_counter()
        r = client.post("/v1/search", json=search_body(q, mode, rerank))
        ms = (time.perf_counter() - t) * 1000
        if r.status_code != 200:
            error = (r.json() if r.headers.get("content-type", "").startswith("application/json") else {}).get("error", {})
            errors.append({"query": i, "status": r.status_code, "ms": ms, "code": error.get("code"),
                           "message": error.get("message", r.text[:300])})
            print(f"  search {i} failed after {ms:.0f} ms: {errors[-1]}", flush=True)
            continue
        rtt.append(ms)
        body = r.json()
        assert body["mode"] == mode and body["reranked"] == rerank, body
        for s in STAGES:
            if s in body["timings_ms"]:
                stages[s].append(body["timings_ms"][s])
        hits[i] = [h["doc_id"] for h in body["hits"]]
        if after is not None:
            after(i)
    return {"mode": mode, "rerank": rerank, "queries": len(queries), "errors": errors,
            "stages_ms": {s: summarize(v) for s, v in stages.items() if v}, "client_ms": summarize(rtt),
            "hits": hits}


async def concurrent(url: str, queries: list[str], mode: str, *, concurrency: int, duration_s: float) -> dict[str, Any]:
    """``concurrency`` clients, each sending its next search as soon as the last one answered."""
    latencies: list[float] = []
    stages: dict[str, list[float]] = {s: [] for s in STAGES}
    errors: dict[str, int] = {}
    counter = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120,
                                 limits=limits) as client:
        await asyncio.gather(*(client.post("/v1/search", json=search_body(q, mode, False))
                               for q in queries[:concurrency]))  # warm-up: every connection open
        deadline = time.perf_counter() + duration_s

        async def worker() -> None:
            nonlocal counter
            while time.perf_counter() < deadline:
                q = queries[counter % len(queries)]
                counter += 1
                t = time.perf_counter()
                try:
                    r = await client.post("/v1/search", json=search_body(q, mode, False))
                except httpx.HTTPError as exc:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                    continue
                ms = (time.perf_counter() - t) * 1000
                if r.status_code != 200:
                    code = r.json().get("error", {}).get("code") if r.headers.get("content-type", "").startswith(
                        "application/json") else None
                    kind = f"{r.status_code} {code}"
                    errors[kind] = errors.get(kind, 0) + 1
                    continue
                latencies.append(ms)
                for s, v in r.json()["timings_ms"].items():
                    if s in stages:
                        stages[s].append(v)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    lat = summarize(latencies)
    return {"mode": mode, "concurrency": concurrency, "duration_s": wall, "ok": len(latencies),
            "errors": sum(errors.values()), "error_kinds": errors, "throughput_rps": len(latencies) / wall,
            "latency_ms": lat, "p99_over_p50": lat["p99"] / lat["p50"] if lat["p50"] else float("inf"),
            "stages_ms": {s: summarize(v) for s, v in stages.items() if v}}


async def runner_concurrent(embed_url: str, queries: list[str], *, concurrency: int, duration_s: float,
                            max_model_len: int) -> dict[str, Any]:
    """The embedding runner alone under the same load: one query a request, as the API sends it, so the
    API's embed stage and tail can be read against the runner's own."""
    model = QWEN3.embedding
    latencies: list[float] = []
    errors = 0
    counter = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    def body(q: str) -> dict[str, Any]:
        return {"model": model.name, "input": [model.format_query(q)], "encoding_format": "float",
                "truncate_prompt_tokens": min(model.max_tokens, max_model_len)}

    async with httpx.AsyncClient(base_url=embed_url, timeout=120, limits=limits) as client:
        await asyncio.gather(*(client.post("/v1/embeddings", json=body(q)) for q in queries[:concurrency]))
        deadline = time.perf_counter() + duration_s

        async def worker() -> None:
            nonlocal counter, errors
            while time.perf_counter() < deadline:
                q = queries[counter % len(queries)]
                counter += 1
                t = time.perf_counter()
                try:
                    r = await client.post("/v1/embeddings", json=body(q))
                except httpx.HTTPError:
                    errors += 1
                    continue
                if r.status_code != 200:
                    errors += 1
                    continue
                latencies.append((time.perf_counter() - t) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    lat = summarize(latencies)
    return {"mode": "embedding runner alone", "concurrency": concurrency, "duration_s": wall, "ok": len(latencies),
            "errors": errors, "throughput_rps": len(latencies) / wall, "latency_ms": lat,
            "p99_over_p50": lat["p99"] / lat["p50"] if lat["p50"] else float("inf")}


def runner_up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def search_route_seconds(url: str) -> tuple[float, int]:
    """(sum of seconds, count) of ``/v1/search`` requests as the server's own middleware timed them."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).text
    total, count = 0.0, 0
    for family in text_string_to_metric_families(text):
        if family.name != "ragserve_request_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("route") == "/v1/search":
                if sample.name.endswith("_sum"):
                    total += sample.value
                elif sample.name.endswith("_count"):
                    count += int(sample.value)
    return total, count


def query_vectors(embed_url: str, queries: list[str], max_model_len: int) -> np.ndarray:
    """The vectors the API searches with: the same formatting and request as its EmbeddingClient."""
    model = QWEN3.embedding
    out = []
    with httpx.Client(base_url=embed_url, timeout=60) as client:
        for q in queries:
            r = client.post("/v1/embeddings", json={
                "model": model.name, "input": [model.format_query(q)], "encoding_format": "float",
                "truncate_prompt_tokens": min(model.max_tokens, max_model_len)})
            r.raise_for_status()
            out.append(r.json()["data"][0]["embedding"])
    vectors = np.asarray(out, dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)  # type: ignore[no-any-return]


class NumpyDense:
    """Exact top ``k`` by cosine (rows are unit length): ``matrix @ q``, argpartition, sort the ``k``. Timed
    query by query, interleaved with the API's searches, so both see the same machine load; each query runs
    twice, with numpy's default BLAS threads and with one thread (threadpoolctl, when installed): on a shared
    machine a two-thread BLAS call may wait for a core, so the faster of the two is the reference."""

    def __init__(self, matrix: np.ndarray, vectors: np.ndarray, k: int = 10) -> None:
        self.matrix, self.vectors, self.k = matrix, vectors, k
        self.times_ms: dict[str, list[float]] = {"default threads": [], "1 thread": []}
        self.top: dict[int, np.ndarray] = {}
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            self._one_thread = None
            del self.times_ms["1 thread"]
        else:
            self._one_thread = threadpool_limits
        for q in vectors[:3]:
            _ = matrix @ q  # warm-up (pages the matrix in)

    def _top(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        k = self.k
        t = time.perf_counter()
        scores = self.matrix @ q
        idx = np.argpartition(-scores, k)[:k]
        idx = idx[np.argsort(-scores[idx])]
        return (time.perf_counter() - t) * 1000, idx

    def __call__(self, i: int) -> None:
        ms, self.top[i] = self._top(self.vectors[i])
        self.times_ms["default threads"].append(ms)
        if self._one_thread is not None:
            with self._one_thread(1):
                ms, _ = self._top(self.vectors[i])
            self.times_ms["1 thread"].append(ms)

    def summary(self) -> dict[str, Any]:
        variants = {name: summarize(v) for name, v in self.times_ms.items()}
        best = min(variants, key=lambda name: variants[name]["p50"])
        return {"ms": variants[best], "reference": best, "variants": variants,
                "note": "timed right after each concurrency-1 search without rerank; reference: the faster p50"}


def recall_at_k(api_hits: dict[int, list[str]], exact: dict[int, np.ndarray], k: int = 10) -> float:
    found = [len(set(api_hits[i][:k]) & {prefill_doc_id(int(j)) for j in e[:k]}) / k
             for i, e in exact.items() if i in api_hits]
    return float(np.mean(found))


# --- the report ----------------------------------------------------------------------------------------


def report(result: dict[str, Any]) -> str:
    lines = []
    p = result["prefill"]
    lines.append(f"\nprefill: {p['points']:,} points x {result['dims']} dims through POST /documents, "
                 f"{p['batch']} a request")
    lines.append(f"  {p['docs_per_s']:,.0f} docs/s (request time {p['request_s']:.1f}s; wall with client encoding "
                 f"{p['wall_s']:.1f}s), request p50 {p['request_ms']['p50']:.0f} ms, max {p['request_ms']['max']:.0f} ms")
    for stage, s in p["server_timings_ms"].items():
        lines.append(f"  server {stage}: p50 {s['p50']:.0f} ms, max {s['max']:.0f} ms a request")
    h = p["health_ms"]
    lines.append(f"  /health meanwhile: p50 {h['p50']:.1f} ms, p99 {h['p99']:.1f} ms, max {h['max']:.1f} ms "
                 f"({h['n']} pings)")

    lines.append(f"\nconcurrency 1, {result['queries']} queries each ({result['rerank_queries']} with rerank), "
                 "p50 ms (timings_ms of the response; client: round trip):")
    lines.append(f"  {'mode':<8}{'rerank':<8}" + "".join(f"{s:>10}" for s in STAGES) + f"{'client':>10}{'errors':>8}")
    for r in result["sequential"]:
        row = "".join(f"{r['stages_ms'][s]['p50']:>10.2f}" if s in r["stages_ms"] else f"{'-':>10}" for s in STAGES)
        lines.append(f"  {r['mode']:<8}{'on' if r['rerank'] else 'off':<8}{row}{r['client_ms']['p50']:>10.2f}"
                     f"{len(r['errors']):>8}")
        for e in r["errors"]:
            lines.append(f"  {'':<16}error: {e['status']} {e['code']} after {e['ms']:.0f} ms: {e['message']}")
    n = result["numpy"]
    if result.get("skipped"):
        lines.append(f"  skipped: {result['skipped']}")
    lines.append("  numpy brute-force dense top-10 (same matrix, same query vectors, timed between the searches):")
    for name, v in n.get("variants", {"default threads": n["ms"]}).items():
        mark = "  <- reference" if name == n.get("reference", name) else ""
        lines.append(f"    {name:<16} p50 {v['p50']:.2f} ms, p90 {v['p90']:.2f} ms{mark}")
    lines.append(f"  recall@10 of the API's dense hits against numpy: {result['recall_at_10']:.4f}")

    r = result["ratios"]
    lines.append("\nsearch stage p50 / numpy dense p50 (target: hybrid <= 2):")
    for key, value in r.items():
        lines.append(f"  {key:<28}{value:>8.2f}")

    lines.append(f"\nconcurrency {result['concurrency']}, {result['duration_s']:g}s each, no rerank:")
    lines.append(f"  {'mode':<8}{'ok':>7}{'errors':>8}{'req/s':>8}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"
                 f"{'max ms':>9}{'p99/p50':>9}  server p50 embed / search / total; mean: client / route / total")
    for c in result["concurrent"]:
        lat, st = c["latency_ms"], c["stages_ms"]
        server = " / ".join(f"{st[s]['p50']:.1f}" if s in st else "-" for s in ("embed", "search", "total"))
        server += f"; {lat['mean']:.0f} / {c['server_request_mean_ms']:.0f} / {st['total']['mean']:.0f}"
        lines.append(f"  {c['mode']:<8}{c['ok']:>7}{c['errors']:>8}{c['throughput_rps']:>8.1f}{lat['p50']:>9.1f}"
                     f"{lat['p90']:>9.1f}{lat['p99']:>9.1f}{lat['max']:>9.1f}{c['p99_over_p50']:>9.2f}  {server}")
        lines.append(f"  {'':<8}/health meanwhile: p50 {c['health_ms']['p50']:.1f} ms, max {c['health_ms']['max']:.1f} ms")
    raw = result.get("runner_concurrent")
    if raw:
        lat = raw["latency_ms"]
        lines.append(f"  {'runner':<8}{raw['ok']:>7}{raw['errors']:>8}{raw['throughput_rps']:>8.1f}{lat['p50']:>9.1f}"
                     f"{lat['p90']:>9.1f}{lat['p99']:>9.1f}{lat['max']:>9.1f}{raw['p99_over_p50']:>9.2f}  "
                     "(POST /v1/embeddings on the runner itself, one query a request)")

    lines.append("\nload average (1/5/15 min; the machine is shared): " + "; ".join(
        f"{k} {' '.join(f'{x:.1f}' for x in v)}" for k, v in result["loadavg"].items()))
    t = result["targets"]
    lines.append("\ntargets:")
    lines.append(f"  hybrid search stage p50 <= 2 x numpy dense: {t['hybrid_vs_numpy']:.2f} x -> "
                 f"{'met' if t['hybrid_vs_numpy_met'] else 'NOT met'}")
    for c in result["concurrent"]:
        ok = c["errors"] == 0 and c["p99_over_p50"] <= 3
        kinds = f" {c['error_kinds']}" if c["errors"] else ""
        lines.append(f"  c={c['concurrency']} {c['mode']}: {c['errors']} errors{kinds}, p99/p50 "
                     f"{c['p99_over_p50']:.2f} -> {'met' if ok else 'NOT met'}")
    lines.append(f"  concurrency 1: {t['sequential_errors']} failed searches")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    seq = result["sequential"]
    labels = [f"{r['mode']}\nrerank {'on' if r['rerank'] else 'off'}" for r in seq]
    ax = axes[0]
    x = np.arange(len(seq))
    width = 0.2
    for j, (stage, colour) in enumerate((("embed", "tab:blue"), ("search", "tab:orange"), ("rerank", "tab:green"),
                                         ("total", "black"))):
        values = [r["stages_ms"].get(stage, {}).get("p50", np.nan) for r in seq]
        ax.bar(x + (j - 1.5) * width, values, width=width, label=stage, color=colour)
    ax.set_xticks(x, labels)
    ax.set_yscale("log")
    ax.set_ylabel("ms (p50, log scale)")
    ax.set_title("concurrency 1: per-stage p50")
    ax.legend()

    ax = axes[1]
    numpy_ms = result["numpy"]["ms"]["p50"]
    names = [f"{r['mode']}\nrerank {'on' if r['rerank'] else 'off'}" for r in seq]
    values = [r["stages_ms"]["search"]["p50"] for r in seq]
    ax.bar(["numpy\ndense", *names], [numpy_ms, *values],
           color=["tab:gray"] + ["tab:orange"] * len(values))
    ax.axhline(2 * numpy_ms, color="red", linestyle="--", label="2 x numpy dense (target for hybrid)")
    ax.set_ylabel("ms (p50)")
    ax.set_title(f"search stage vs numpy brute force, {result['points']:,} x {result['dims']}")
    ax.legend()

    ax = axes[2]
    conc = result["concurrent"] + ([result["runner_concurrent"]] if result.get("runner_concurrent") else [])
    x = np.arange(len(conc))
    for offset, key, colour in ((-0.2, "p50", "tab:blue"), (0.2, "p99", "tab:red")):
        ax.bar(x + offset, [c["latency_ms"][key] for c in conc], width=0.4, label=key, color=colour)
    for i, c in enumerate(conc):
        ax.text(i, c["latency_ms"]["p99"], f"{c['throughput_rps']:.0f} req/s\n{c['errors']} errors",
                ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, [c["mode"].replace("embedding runner alone", "embed runner\nalone") for c in conc])
    ax.set_ylim(0, max(c["latency_ms"]["p99"] for c in conc) * 1.25)
    ax.set_ylabel("ms (client round trip)")
    ax.set_title(f"concurrency {result['concurrency']}, no rerank")
    ax.legend()
    fig.suptitle(f"ragserve /v1/search, embedded Qdrant Edge, {result['points']:,} points x {result['dims']} dims")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --- main ----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--dims", type=int, default=QWEN3.embedding.dimensions)
    parser.add_argument("--batch", type=int, default=1000, help="documents per POST /documents request")
    parser.add_argument("--queries", type=int, default=100, help="searches per concurrency-1 configuration")
    parser.add_argument("--rerank-queries", type=int, default=30,
                        help="searches per concurrency-1 configuration with rerank (the reranker is slow on CPU)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per concurrent run")
    parser.add_argument("--embed-url", default="http://127.0.0.1:18101")
    parser.add_argument("--rerank-url", default="http://127.0.0.1:18102")
    parser.add_argument("--max-model-len", type=int, default=2048, help="--max-model-len the runners run with")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--plot", type=Path, default=None, help="draw a PNG here")
    parser.add_argument("--py-spy", type=Path, default=None, help="folder for py-spy samples of the server")
    parser.add_argument("--server-log", type=Path, default=None, help="keep the server's log here")
    parser.add_argument("--replot", type=Path, default=None,
                        help="print the tables and draw --plot from an earlier --json, without running anything")
    args = parser.parse_args()
    if args.replot:
        result = json.loads(args.replot.read_text())
        print(report(result))
        if args.plot:
            plot(result, args.plot)
            print(f"wrote {args.plot}")
        return

    corpus = synthetic_corpus(args.points, args.dims)
    queries = corpus.queries(max(args.queries + 10, 2000))
    seq_queries = queries[: args.queries]
    result: dict[str, Any] = {"points": args.points, "dims": args.dims, "queries": args.queries,
                              "rerank_queries": args.rerank_queries,
                              "concurrency": args.concurrency, "duration_s": args.duration,
                              "store": "qdrant-edge (embedded)", "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        with api_process(Path(tmp) / "data", embed_url=args.embed_url, rerank_url=args.rerank_url,
                         max_model_len=args.max_model_len,
                         log_path=args.server_log or Path(tmp) / "serve.log") as (url, proc):
            spy = args.py_spy
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=600) as client:
                client.post("/v1/collections", json={"name": COLLECTION, "dimensions": args.dims}).raise_for_status()
                print(f"API at {url} (pid {proc.pid}); filling {COLLECTION!r}", flush=True)
                with py_spy(proc.pid, spy / "prefill.txt" if spy else None), HealthProbe(url) as probe:
                    result["prefill"] = prefill(client, COLLECTION, corpus, batch=args.batch)
                result["prefill"]["health_ms"] = probe.summary()
                result["loadavg"] = {"after prefill": os.getloadavg()}
                count = client.get(f"/v1/collections/{COLLECTION}").json()["points"]
                assert count == args.points, f"{count} points stored, {args.points} sent"

                vectors = query_vectors(args.embed_url, seq_queries, args.max_model_len)
                numpy_dense = NumpyDense(corpus.matrix, vectors)
                result["sequential"] = []
                configs = CONFIGS
                if not runner_up(args.rerank_url):
                    configs = [c for c in CONFIGS if not c[1]]
                    result["skipped"] = f"rerank on: the reranker at {args.rerank_url} does not answer /health"
                    print(f"  skipping rerank on: {result['skipped']}", flush=True)
                for mode, rerank in configs:
                    print(f"concurrency 1: {mode}, rerank {'on' if rerank else 'off'}", flush=True)
                    n = args.rerank_queries if rerank else args.queries
                    result["sequential"].append(sequential(client, seq_queries[:n], mode, rerank,
                                                           after=None if rerank else numpy_dense))
                    if (mode, rerank) == ("dense", False):
                        result["recall_at_10"] = recall_at_k(result["sequential"][-1]["hits"], numpy_dense.top)

            result["loadavg"]["after concurrency 1"] = os.getloadavg()
            result["numpy"] = numpy_dense.summary()
            numpy_ms = result["numpy"]["ms"]["p50"]
            result["ratios"] = {f"{r['mode']} (rerank {'on' if r['rerank'] else 'off'})":
                                r["stages_ms"]["search"]["p50"] / numpy_ms
                                for r in result["sequential"] if "search" in r["stages_ms"]}

            print(f"concurrency {args.concurrency}: the embedding runner alone, {args.duration:g}s", flush=True)
            result["runner_concurrent"] = asyncio.run(runner_concurrent(
                args.embed_url, queries, concurrency=args.concurrency, duration_s=args.duration,
                max_model_len=args.max_model_len))
            result["concurrent"] = []
            for mode in ("dense", "hybrid"):
                print(f"concurrency {args.concurrency}: {mode}, {args.duration:g}s", flush=True)
                before = search_route_seconds(url)
                with py_spy(proc.pid, spy / f"c{args.concurrency}-{mode}.txt" if spy else None), \
                        HealthProbe(url, interval_s=0.1) as probe:
                    run = asyncio.run(concurrent(url, queries, mode, concurrency=args.concurrency,
                                                 duration_s=args.duration))
                after = search_route_seconds(url)
                run["health_ms"] = probe.summary()
                # includes the warm-up requests: a mean over the whole phase, beside the client's mean
                run["server_request_mean_ms"] = (after[0] - before[0]) / max(after[1] - before[1], 1) * 1000
                result["concurrent"].append(run)
                result["loadavg"][f"after concurrency {args.concurrency} {mode}"] = os.getloadavg()

    hybrid = next(r for r in result["sequential"] if r["mode"] == "hybrid" and not r["rerank"])
    ratio = hybrid["stages_ms"]["search"]["p50"] / result["numpy"]["ms"]["p50"]
    result["targets"] = {
        "hybrid_vs_numpy": ratio, "hybrid_vs_numpy_met": ratio <= 2,
        "concurrent_met": all(c["errors"] == 0 and c["p99_over_p50"] <= 3 for c in result["concurrent"]),
        "sequential_errors": sum(len(r["errors"]) for r in result["sequential"]),
    }
    for r in result["sequential"]:
        r.pop("hits")
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
        print(f"\nwrote {args.json}")
    if args.plot:
        plot(result, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
