"""Shared by the API benchmarks: structured synthetic collections, filled through the real API.

Vectors are cluster centres plus Gaussian noise, unit length, rounded to 6 decimals so the JSON stays short
(the float32 matrix kept here holds exactly what the store receives, so numpy brute force runs on the same
data). Texts are short sentences of made-up words (a Zipf-like vocabulary plus a few topic words per
cluster), so every point also gets a BM25 vector and hybrid queries find matching terms.

:func:`prefill` sends them to ``POST /v1/collections/{name}/documents`` with precomputed ``vector``s, a batch
per request, and times it; :class:`HealthProbe` pings ``/health`` meanwhile, so an event loop that stalls
shows up as a slow ``/health``; :func:`py_spy` samples a server process with py-spy while a phase runs.
"""

from __future__ import annotations

import base64
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def vocabulary(size: int, seed: int = 7) -> list[str]:
    """``size`` distinct pronounceable made-up words (2-4 syllables), deterministic."""
    rng = np.random.default_rng(seed)
    words: dict[str, None] = {}
    while len(words) < size:
        n = int(rng.integers(2, 5))
        words["".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), n))] = None
    return list(words)


@dataclass
class SyntheticCorpus:
    """``n`` points of ``dims`` dimensions in ``clusters`` clusters, with their texts; queries to match."""

    matrix: np.ndarray
    """float32, unit rows (as the store holds them), ``n x dims``."""
    texts: list[str]
    assignment: np.ndarray
    words: list[str]
    topics: np.ndarray
    """``clusters x topic_words`` word indices: the words a cluster's texts favour."""
    seed: int

    def vectors_json(self, start: int, end: int) -> list[list[float]]:
        """Rows ``start:end`` as JSON-ready floats with short decimal forms (the values the store receives)."""
        return np.round(self.matrix[start:end].astype(np.float64), 6).tolist()  # type: ignore[no-any-return]

    def vectors_base64(self, start: int, end: int) -> list[str]:
        """Rows ``start:end`` as base64 little-endian float32 (``vector_base64``), the values ``vectors_json``
        rounds to."""
        rows = np.round(self.matrix[start:end].astype(np.float64), 6).astype("<f4")
        return [base64.b64encode(row.tobytes()).decode() for row in rows]

    def queries(self, n: int, seed: int = 11) -> list[str]:
        """Short queries: two topic words of a random cluster plus one or two common words."""
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(n):
            topic = self.topics[int(rng.integers(0, len(self.topics)))]
            picked = [self.words[i] for i in rng.choice(topic, 2, replace=False)]
            picked += [self.words[i] for i in _zipf(rng, len(self.words), int(rng.integers(1, 3)))]
            out.append(" ".join(picked))
        return out


def _zipf(rng: np.random.Generator, vocab: int, k: int) -> np.ndarray:
    """``k`` word indices, skewed towards the frequent (low) ones."""
    return np.minimum((rng.pareto(1.1, k) * 20).astype(int), vocab - 1)


def synthetic_corpus(n: int, dims: int, *, clusters: int = 256, noise: float = 0.6, vocab: int = 5000,
                     topic_words: int = 12, seed: int = 0, progress: Callable[[str], None] = print) -> SyntheticCorpus:
    """Structured vectors (centre + noise, normalised, rounded as sent) and short texts, in chunks of rows
    so that a 100k x 1024 corpus never needs more than its own float32 matrix in memory."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dims)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    assignment = rng.integers(0, clusters, n)
    matrix = np.empty((n, dims), dtype=np.float32)
    step = 10_000
    for start in range(0, n, step):
        end = min(start + step, n)
        rows = centres[assignment[start:end]] + rng.standard_normal((end - start, dims)).astype(np.float32) * (
            noise / np.sqrt(dims))
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        rows = np.round(rows.astype(np.float64), 6)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)  # what a cosine engine stores: the sent vector, unit
        matrix[start:end] = rows
    words = vocabulary(vocab, seed)
    topics = rng.choice(vocab, (clusters, topic_words), replace=True)
    texts = []
    for i in range(n):
        topic = topics[assignment[i]]
        length = int(rng.integers(8, 21))
        n_topic = int(rng.integers(2, 5))
        idx = np.concatenate([rng.choice(topic, n_topic), _zipf(rng, vocab, length - n_topic)])
        rng.shuffle(idx)
        texts.append(" ".join(words[j] for j in idx).capitalize() + ".")
    progress(f"synthetic corpus: {n} x {dims} in {clusters} clusters, {time.perf_counter() - started:.1f}s")
    return SyntheticCorpus(matrix, texts, assignment, words, topics, seed)


def prefill_doc_id(i: int) -> str:
    return f"prefill-{i:07d}"


def prefill(client: httpx.Client, collection: str, corpus: SyntheticCorpus, *, batch: int = 1000,
            progress: Callable[[str], None] = print, encoding: str = "base64") -> dict[str, Any]:
    """Send every point through ``POST /v1/collections/{collection}/documents`` with its vector (as
    ``vector_base64``, or a JSON list with ``encoding="json"``), ``batch`` a request, one request at a time. Each body is encoded before its clock starts, so ``docs_per_s`` is the
    API's rate (request sent to answer read), not this client's JSON encoding; ``wall_s`` includes both."""
    n = len(corpus.texts)
    started = time.perf_counter()
    request_s: list[float] = []
    server: dict[str, list[float]] = {}
    for start in range(0, n, batch):
        end = min(start + batch, n)
        field, vectors = (("vector_base64", corpus.vectors_base64(start, end)) if encoding == "base64"
                          else ("vector", corpus.vectors_json(start, end)))
        docs = [{"id": prefill_doc_id(i), "text": corpus.texts[i], "metadata": {"cluster": int(corpus.assignment[i])},
                 field: v} for i, v in zip(range(start, end), vectors, strict=True)]
        body = json.dumps({"documents": docs}).encode()
        t = time.perf_counter()
        r = client.post(f"/v1/collections/{collection}/documents", content=body,
                        headers={"Content-Type": "application/json"})
        request_s.append(time.perf_counter() - t)
        if r.status_code != 200:
            raise RuntimeError(f"prefill request {start}-{end} answered {r.status_code}: {r.text[:500]}")
        for stage, ms in r.json().get("timings_ms", {}).items():
            server.setdefault(stage, []).append(ms)
        done = len(request_s)
        if done == 1 or done % 10 == 0 or end == n:
            rate = end / sum(request_s)
            progress(f"  prefill {end}/{n}: {rate:,.0f} docs/s (last request {request_s[-1] * 1000:.0f} ms, "
                     f"{len(body) / 1e6:.1f} MB)")
    wall = time.perf_counter() - started
    return {
        "points": n, "batch": batch, "encoding": encoding, "requests": len(request_s), "request_s": sum(request_s), "wall_s": wall,
        "docs_per_s": n / sum(request_s), "docs_per_s_wall": n / wall,
        "request_ms": summarize([s * 1000 for s in request_s]),
        "server_timings_ms": {k: summarize(v) for k, v in server.items()},
    }


def summarize(values: list[float]) -> dict[str, float]:
    """p50 / p90 / p99 / max / mean of a list of milliseconds (empty: zeros)."""
    if not values:
        return {"n": 0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0}
    a = np.asarray(values, dtype=np.float64)
    return {"n": int(a.size), "p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99)), "max": float(a.max()), "mean": float(a.mean())}


@dataclass
class HealthProbe:
    """Pings ``GET /health`` every ``interval_s`` from a thread; slow answers mean a blocked event loop
    (``/health`` does no I/O). Use as a context manager; ``latencies_ms`` and :meth:`summary` after."""

    base_url: str
    interval_s: float = 0.05
    latencies_ms: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> HealthProbe:
        self._thread = threading.Thread(target=self._run, name="health-probe", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=60) as client:
            while not self._stop.is_set():
                t = time.perf_counter()
                try:
                    client.get("/health")
                except httpx.HTTPError:
                    pass
                self.latencies_ms.append((time.perf_counter() - t) * 1000)
                self._stop.wait(self.interval_s)

    def summary(self) -> dict[str, float]:
        return summarize(self.latencies_ms)


@contextmanager
def py_spy(pid: int, out: Path | None) -> Iterator[None]:
    """Sample ``pid`` with py-spy while the block runs (no-op without ``out``): raw collapsed stacks."""
    if out is None:
        yield
        return
    exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if exe is None:
        raise SystemExit("--py-spy needs py-spy: pip install py-spy into the venv")
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = subprocess.Popen([exe, "record", "--pid", str(pid), "--format", "raw", "--output", str(out),
                            "--rate", "100", "--threads", "--nonblocking"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the phase starts
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(timeout=60)
        except subprocess.TimeoutExpired:
            spy.kill()
