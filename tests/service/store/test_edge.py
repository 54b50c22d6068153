"""What only the embedded store does: its folder layout, its one-process lock, durability on reopen, and
the offline optimizes (``ragserve optimize``: the HNSW build, or with ``--int8`` the int8 quantization)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from service.config import Settings
from service.server import preflight
from service.sparse.config import SparseConfig
from service.store.edge import EdgeStore
from service.store.edge_optimize import optimize_collection
from service.store.edge_shard import search_pool_size
from service.store.errors import LegacyStoreLayout, StoreError, StoreLocked
from service.store.types import Chunk, Fusion, SparseVector, doc_filter

LOCAL_MODE_META = {"collections": {"kb": {"vectors": {"dense": {"size": 384, "distance": "Cosine"}}}}, "aliases": {}}


def local_mode_folder(root: Path) -> dict[str, bytes]:
    """What qdrant-client's local mode (ragserve before Qdrant Edge) leaves in its folder."""
    (root / "collection" / "kb").mkdir(parents=True)
    (root / "meta.json").write_text(json.dumps(LOCAL_MODE_META))
    (root / "collection" / "kb" / "storage.sqlite").write_bytes(b"SQLite format 3\x00" + bytes(100))
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


async def test_a_local_mode_folder_is_refused_and_left_untouched(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    before = local_mode_folder(root)
    with pytest.raises(LegacyStoreLayout) as exc:
        await EdgeStore.open(root)
    assert str(root) in exc.value.message and "re-index" in exc.value.message.lower()
    with pytest.raises(LegacyStoreLayout):
        preflight(Settings(data_dir=tmp_path))
    after = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    assert after == before  # nothing deleted, nothing added


def test_serve_refuses_a_local_mode_folder_with_a_message_naming_it(tmp_path: Path) -> None:
    local_mode_folder(tmp_path / "qdrant")
    r = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--data-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60, env={"RAGSERVE_API_KEYS": "k" * 20, "PATH": ""})
    assert r.returncode == 2
    assert f"the store folder {tmp_path / 'qdrant'} cannot be opened" in r.stderr and "Traceback" not in r.stderr


async def test_one_process_per_folder(tmp_path: Path) -> None:
    store = await EdgeStore.open(tmp_path / "s")
    try:
        with pytest.raises(StoreLocked, match=r"pid \d+"):
            await EdgeStore.open(tmp_path / "s")
        other = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", "import asyncio, sys; from pathlib import Path; from service.store.edge import "
             "EdgeStore; asyncio.run(EdgeStore.open(Path(sys.argv[1])))", str(tmp_path / "s")],
            capture_output=True, text=True, timeout=60)
        assert other.returncode != 0 and "StoreLocked" in other.stderr and "admits one process" in other.stderr
        with pytest.raises(StoreLocked):
            optimize_collection(tmp_path / "s", "any")
    finally:
        await store.aclose()
    reopened = await EdgeStore.open(tmp_path / "s")  # released on close
    await reopened.aclose()


KILLED_WRITER = """
import asyncio, os, signal, sys
from pathlib import Path
from service.store.edge import EdgeStore
from service.store.types import Chunk

async def main():
    store = await EdgeStore.open(Path(sys.argv[1]), write_batch=7)
    await store.create_collection("c", dimensions=4, model="m", filter_fields={"lang": "keyword"})
    chunks = [Chunk(f"d{i}", 0, f"t{i}", {"lang": "en"}) for i in range(40)]
    await store.upsert("c", chunks, [[float(i % 4 == j) for j in range(4)] for i in range(40)])
    print("acknowledged", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no flush, no close

asyncio.run(main())
"""


async def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    r = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", KILLED_WRITER, str(tmp_path / "s")],
                                capture_output=True, text=True, timeout=60)
    assert r.returncode == -9 and r.stdout == "acknowledged\n", r.stderr
    reopened = await EdgeStore.open(tmp_path / "s")
    try:
        info = await reopened.get_collection("c")
        assert (info.points, info.filter_fields) == (40, {"lang": "keyword"})
        states = await reopened.doc_states("c")
        assert set(states) == {f"d{i}" for i in range(40)} and all(s.complete for s in states.values())
        hits = await reopened.query("c", dense=[0, 0, 1, 0], limit=3, query_filter=None)
        assert {h.doc_id for h in hits} <= {f"d{i}" for i in range(2, 40, 4)}
    finally:
        await reopened.aclose()


async def test_optimize_builds_hnsw_offline_and_search_keeps_its_answers(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(20, 64))
    vectors = centres[rng.integers(0, 20, size=3000)] + 0.3 * rng.normal(size=(3000, 64))
    queries = centres[rng.integers(0, 20, size=30)] + 0.3 * rng.normal(size=(30, 64))
    store = await EdgeStore.open(tmp_path / "s")
    await store.create_collection("c", dimensions=64, model="m")
    await store.upsert("c", [Chunk(f"d{i}", 0, "t", {}) for i in range(3000)], vectors.tolist())
    exact = [[h.doc_id for h in await store.query("c", dense=q.tolist(), limit=10)] for q in queries]
    await store.aclose()

    lines: list[str] = []
    result = optimize_collection(tmp_path / "s", "c", progress=lines.append)
    assert (result["mode"], result["points"], result["indexed"], result["changed"]) == ("hnsw", 3000, 3000, True)
    assert lines[0].startswith("optimizing 'c' (HNSW graph): 3000 points, 64 dims; about ")
    assert lines[1].startswith("done in ") and lines[1].endswith(
        "s: 3000 of 3000 points' dense vectors are in HNSW segments (2 segment(s))")
    assert "quantization" not in json.loads((tmp_path / "s" / "collections" / "c" / "collection.json").read_text())

    store = await EdgeStore.open(tmp_path / "s")
    try:
        approx = [[h.doc_id for h in await store.query("c", dense=q.tolist(), limit=10)] for q in queries]
    finally:
        await store.aclose()
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact, strict=True)])
    assert recall >= 0.95

    # Switched to int8 afterwards: the engine rebuilds the HNSW segment to the new config (m=0, quantized).
    lines.clear()
    result = optimize_collection(tmp_path / "s", "c", quantization="int8", progress=lines.append)
    assert (result["mode"], result["indexed"], result["changed"]) == ("int8", 3000, True)
    assert "3000 of 3000 points' dense vectors are int8-quantized" in lines[1]
    store = await EdgeStore.open(tmp_path / "s")
    try:
        int8_ids = [[h.doc_id for h in await store.query("c", dense=q.tolist(), limit=10)] for q in queries]
    finally:
        await store.aclose()
    assert np.mean([len(set(a) & set(e)) / 10 for a, e in zip(int8_ids, exact, strict=True)]) >= 0.99


def index_storage(segment: Path) -> dict[str, object]:
    """Each indexed field's keyword index storage, as the engine wrote it in the segment's payload_index/config.json."""
    config = json.loads((segment / "payload_index" / "config.json").read_text())
    return {f: next(t["storage_type"] for t in types if t["index_type"] == "keyword_index")
            for f, types in config["indexed_types"].items()}


async def test_internal_payload_indexes_are_memory_mapped_and_still_find_documents(tmp_path: Path) -> None:
    """The indexes every collection gets serve replaces and deletes; they are memory-mapped, so a load (a restart,
    a build's swap) does not read them into the process. A filter field the user declared stays in RAM."""
    root = tmp_path / "s"
    store = await EdgeStore.open(root)
    await store.create_collection("c", dimensions=8, model="m", filter_fields={"lang": "keyword"})
    x = np.random.default_rng(5).normal(size=(3000, 8))
    await store.upsert("c", [Chunk(f"d{i // 3}", i % 3, "t", {"lang": "en"}, content_hash=f"h{i // 3}",
                                   chunk_count=3, source=f"s{i % 2}") for i in range(3000)], x.tolist())
    await store.aclose()
    optimize_collection(root, "c", progress=lambda _: None)

    segments = [p for p in (root / "collections" / "c" / "shard" / "segments").iterdir()
                if (p / "vector_index-dense").is_dir()]
    cold, ram = {"mmap": {"is_on_disk": True}}, {"mmap": {"is_on_disk": False}}
    assert segments and all(index_storage(p) == {"doc_id": cold, "source": cold, "content_hash": cold,
                                                 "tenant": cold, "metadata.lang": ram} for p in segments)
    store = await EdgeStore.open(root)
    try:
        states = await store.scroll_states("c", doc_filter(doc_ids=["d7", "d900"]))
        assert {d: (s.content_hash, s.chunk_indices) for d, s in states.items()} == {
            "d7": ("h7", frozenset({0, 1, 2})), "d900": ("h900", frozenset({0, 1, 2}))}
        await store.delete("c", doc_filter(doc_ids=["d7"]))
        assert sorted(await store.scroll_states("c", doc_filter(doc_ids=["d6", "d7", "d8"]))) == ["d6", "d8"]
        assert await store.count("c", doc_filter(source="s1")) == 1500 - 2  # d7's chunks 0 and 2 (i = 21, 23)
    finally:
        await store.aclose()


# --- int8 scalar quantization (``ragserve optimize --int8``) ------------------------------------------------------

DIM = 384
N_INT8 = 4000
PRODUCTION_FUSION = Fusion("rrf", prefetch_limit=100, rrf_k=2, dense_weight=1.0, sparse_weight=1.5)


def clustered(rng: np.random.Generator, centres: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Points around the centres with as much noise again, normalised (docs/store-benchmark.md's synthetic data):
    100 clusters of a few dozen points, close enough that int8 alone misorders neighbours."""
    labels = rng.integers(0, len(centres), size=n)
    x = centres[labels] + rng.normal(size=(n, centres.shape[1]))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), labels


def topic_sparse(rng: np.random.Generator, label: int) -> SparseVector:
    """Two of the cluster's four topic terms and five from a shared vocabulary, with weights that leave no two
    documents tied on a query (tied points may come in any order, and the optimize rebuilds the segment)."""
    terms = sorted({1 + 4 * label + int(j) for j in rng.choice(4, size=2, replace=False)}
                   | {int(t) for t in rng.integers(401, 2000, size=5)})
    return SparseVector(terms, rng.uniform(0.5, 2.0, size=len(terms)).tolist())


def topic_query(label: int) -> SparseVector:
    return SparseVector([1 + 4 * label + j for j in range(4)], [1.0] * 4)


async def dense_ids(store: EdgeStore, queries: np.ndarray, *, one_engine_call: bool = False) -> list[list[str]]:
    """``one_engine_call``: the engine's own top 10, without the extra hits ``query`` asks for to settle ties
    (which the engine rescores too)."""
    query = store.engine_query if one_engine_call else store.query
    return [[h.doc_id for h in await query("c", dense=q.tolist(), limit=10)] for q in queries]


async def hybrid_ids(store: EdgeStore, queries: np.ndarray, labels: np.ndarray) -> list[list[str]]:
    return [[h.doc_id for h in await store.query("c", dense=q.tolist(), sparse=topic_query(int(c)), limit=10,
                                                 fusion=PRODUCTION_FUSION)]
            for q, c in zip(queries, labels, strict=True)]


def overlap(got: list[list[str]], want: list[list[str]]) -> float:
    return float(np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got, want, strict=True)]))


def exact_top10(x: np.ndarray, ids: list[str], queries: np.ndarray) -> list[list[str]]:
    return [[ids[j] for j in np.argsort(-(x @ q), kind="stable")[:10]] for q in queries]


def clustered_set(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """N_INT8 points and 50 queries drawn around the same 100 centres: points, labels, queries, their labels, ids."""
    centres = rng.normal(size=(100, DIM))
    x, labels = clustered(rng, centres, N_INT8)
    queries, q_labels = clustered(rng, centres, 50)
    return x, labels, queries, q_labels, [f"d{i}" for i in range(N_INT8)]


async def test_int8_optimize_quantizes_and_searches_oversample_to_exact_recall(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    x, labels, queries, q_labels, ids = clustered_set(rng)
    root, meta_path = tmp_path / "s", tmp_path / "s" / "collections" / "c" / "collection.json"
    store = await EdgeStore.open(root)
    await store.create_collection("c", dimensions=DIM, model="m", sparse=SparseConfig())
    await store.upsert("c", [Chunk(d, 0, "t", {}) for d in ids], x.tolist(),
                       [topic_sparse(rng, int(c)) for c in labels])
    hybrid_exact = await hybrid_ids(store, queries, q_labels)  # the plain index: exact dense prefetch
    await store.aclose()

    lines: list[str] = []
    result = optimize_collection(root, "c", quantization="int8", progress=lines.append)
    assert (result["mode"], result["points"], result["indexed"], result["changed"]) == ("int8", N_INT8, N_INT8, True)
    assert lines[0].startswith(f"optimizing 'c' (int8 scalar quantization, a full scan without a graph): {N_INT8} "
                               f"points, {DIM} dims; about ")
    assert lines[1].startswith("done in ") and f": {N_INT8} of {N_INT8} points' dense vectors are int8-quantized" \
        in lines[1] and "RAGSERVE_QDRANT__INT8_OVERSAMPLING" in lines[1]
    assert json.loads(meta_path.read_text())["quantization"] == "int8"
    want = exact_top10(x, ids, queries)

    # Proof that the int8 copy is what is scanned: rescoring only the int8 top-10 loses neighbours.
    store = await EdgeStore.open(root, int8_oversampling=1.0)
    try:
        recall_without = overlap(await dense_ids(store, queries, one_engine_call=True), want)
    finally:
        await store.aclose()
    assert recall_without < 0.99

    store = await EdgeStore.open(root)  # the default: oversampling 2
    try:
        assert (await store.describe("c")).quantization == "int8"
        assert overlap(await dense_ids(store, queries), want) >= 0.99
        assert overlap(await hybrid_ids(store, queries, q_labels), hybrid_exact) >= 0.99
        # Written after the optimize: the appendable segment, searched exactly beside the int8 one.
        new_ids = [f"n{j}" for j in range(len(queries))]
        await store.upsert("c", [Chunk(d, 0, "t", {}) for d in new_ids], queries.tolist(),
                           [topic_query(int(c)) for c in q_labels])
        info = await store.get_collection("c")
        await store.set_sparse_settings("c", info.sparse, info.sparse_stats)  # rewrites collection.json
    finally:
        await store.aclose()
    assert json.loads(meta_path.read_text())["quantization"] == "int8"
    x_all, ids_all = np.vstack([x, queries]), ids + new_ids
    want_all = exact_top10(x_all, ids_all, queries)
    assert [w[0] for w in want_all] == new_ids

    for optimized in (False, True):  # reopened, then after a plain optimize folded the new points in
        store = await EdgeStore.open(root)
        try:
            assert (await store.describe("c")).quantization == "int8"
            got = await dense_ids(store, queries)
            assert [g[0] for g in got] == new_ids and overlap(got, want_all) >= 0.99
            assert [h[0] for h in await hybrid_ids(store, queries, q_labels)] == new_ids
        finally:
            await store.aclose()
        if not optimized:
            lines.clear()
            result = optimize_collection(root, "c", progress=lines.append)  # no --int8: it stays int8
            assert lines[0].startswith("'c' is int8-quantized") and "stays quantized" in lines[0]
            assert (result["mode"], result["indexed"], result["changed"]) == ("int8", N_INT8 + len(queries), True)


async def test_hnsw_int8_optimize_builds_a_graph_over_int8_copies(tmp_path: Path) -> None:
    x, _, queries, _, ids = clustered_set(np.random.default_rng(12))
    root = tmp_path / "s"
    store = await EdgeStore.open(root)
    await store.create_collection("c", dimensions=DIM, model="m")
    await store.upsert("c", [Chunk(d, 0, "t", {}) for d in ids], x.tolist())
    await store.aclose()

    lines: list[str] = []
    result = optimize_collection(root, "c", quantization="hnsw-int8", progress=lines.append)
    assert (result["mode"], result["indexed"], result["changed"]) == ("hnsw-int8", N_INT8, True)
    assert lines[0].startswith("optimizing 'c' (int8 scalar quantization and an HNSW graph over it): ")
    assert f"{N_INT8} of {N_INT8} points' dense vectors are int8-quantized in HNSW segments" in lines[1]
    assert json.loads((root / "collections" / "c" / "collection.json").read_text())["quantization"] == "hnsw-int8"
    segments = [p for p in (root / "collections" / "c" / "shard" / "segments").iterdir()
                if (p / "vector_index-dense").is_dir()]
    assert segments and all(json.loads((p / "vector_index-dense" / "hnsw_config.json").read_text())["m"] == 16
                            and (p / "vector_storage-dense" / "quantized.data").is_file() for p in segments)
    store = await EdgeStore.open(root)
    try:
        assert (await store.describe("c")).quantization == "hnsw-int8"
        assert overlap(await dense_ids(store, queries), exact_top10(x, ids, queries)) >= 0.99
    finally:
        await store.aclose()
    lines.clear()
    optimize_collection(root, "c", progress=lines.append)  # no flag: it stays as it is
    assert lines[0].startswith("'c' is hnsw-int8-quantized") and "stays quantized" in lines[0]


@pytest.mark.parametrize("quantization", [None, "int8", "hnsw-int8"])
async def test_optimize_says_when_it_builds_nothing(tmp_path: Path, quantization: str | None) -> None:
    store = await EdgeStore.open(tmp_path / "s")
    await store.create_collection("c", dimensions=8, model="m", sparse=SparseConfig())
    await store.aclose()
    lines: list[str] = []
    result = optimize_collection(tmp_path / "s", "c", quantization=quantization, progress=lines.append)
    assert not result["changed"] and lines[1].startswith("nothing to build: 'c' is empty")

    store = await EdgeStore.open(tmp_path / "s")  # 2 points x 8 dims: 64 bytes of vectors, below the 1 KB threshold
    await store.upsert("c", [Chunk("a", 0, "t", {}), Chunk("b", 0, "t", {})],
                       [[1.0] + [0.0] * 7, [0.0, 1.0] + [0.0] * 6], [SparseVector([1], [1.0])] * 2)
    await store.aclose()
    lines.clear()
    result = optimize_collection(tmp_path / "s", "c", quantization=quantization, progress=lines.append)
    assert (result["changed"], result["points"], result["indexed"]) == (False, 2, 0)
    assert lines[1].startswith("nothing built: the engine indexes a segment only above 1 KB of vectors, and the 2 "
                               "point(s) not yet indexed are below it; searches over them stay exact")
    assert not any(line.startswith("done") for line in lines)
    store = await EdgeStore.open(tmp_path / "s")
    try:
        assert [h.doc_id for h in await store.query("c", dense=[1.0, 0.5] + [0.0] * 6, limit=2)] == ["a", "b"]
    finally:
        await store.aclose()


def test_the_command_quantizes_and_names_a_missing_collection(tmp_path: Path) -> None:
    async def build() -> None:
        store = await EdgeStore.open(tmp_path / "qdrant")
        await store.create_collection("c", dimensions=64, model="m")
        vectors = np.random.default_rng(2).normal(size=(300, 64))
        await store.upsert("c", [Chunk(f"d{i}", 0, "t", {}) for i in range(300)], vectors.tolist())
        await store.aclose()

    asyncio.run(build())
    env = {"RAGSERVE_API_KEYS": "k" * 20, "PATH": ""}
    args = [sys.executable, "-m", "service.cli", "optimize"]
    r = subprocess.run([*args, "c", "--int8", "--data-dir", str(tmp_path)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "optimizing 'c' (int8 scalar quantization" in r.stdout and "300 of 300 points' dense vectors are " \
        "int8-quantized" in r.stdout
    assert json.loads((tmp_path / "qdrant" / "collections" / "c" / "collection.json").read_text())["quantization"] \
        == "int8"
    # Switched to the graph over the int8 copies (the engine rebuilds the segments to the new config).
    r = subprocess.run([*args, "c", "--hnsw-int8", "--data-dir", str(tmp_path)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "300 of 300 points' dense vectors are int8-quantized in HNSW segments" in r.stdout
    assert json.loads((tmp_path / "qdrant" / "collections" / "c" / "collection.json").read_text())["quantization"] \
        == "hnsw-int8"
    r = subprocess.run([*args, "c", "--int8", "--hnsw-int8", "--data-dir", str(tmp_path)], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 2 and "not allowed with argument" in r.stderr
    r = subprocess.run([*args, "nope", "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"ragserve: collection 'nope' does not exist in {tmp_path / 'qdrant'}" in r.stderr


class _ThreadOf:
    """A shard that notes the thread each engine call of the test runs on, then makes it."""

    def __init__(self, shard: object) -> None:
        self.shard, self.threads = shard, []

    def __getattr__(self, name: str) -> object:
        call = getattr(self.shard, name)

        def noted(*args: object) -> object:
            self.threads.append(threading.get_ident())
            return call(*args)
        return noted


@pytest.mark.parametrize("inline", [False, True])
async def test_an_inline_store_calls_the_engine_on_its_loop_thread_with_the_same_answers_and_errors(
    tmp_path: Path, inline: bool
) -> None:
    """The store's own process opens its EdgeStore ``inline``: the binding holds the GIL for a whole call, so
    the pool's threads ran nothing in parallel there. Same hits, same translated errors, no thread hop."""
    store = await EdgeStore.open(tmp_path, inline=inline)
    try:
        await store.create_collection("c", dimensions=4, model="m")
        vectors = [[1.0, 0.0, 0.0, 0.0], [0.6, 0.8, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]
        await store.upsert("c", [Chunk(f"d{i}", 0, f"text {i}", {"i": i}) for i in range(3)], vectors)
        spy = _ThreadOf(store._collections["c"].shard)
        store._collections["c"].shard = spy  # type: ignore[assignment]
        hits = await store.query("c", dense=[1.0, 0.1, 0.0, 0.0], limit=3)
        assert [(h.doc_id, round(h.score, 4)) for h in hits] == [("d0", 0.995), ("d1", 0.6766), ("d2", 0.0)]
        loop_thread = threading.get_ident()
        assert spy.threads and all((t == loop_thread) is inline for t in spy.threads), spy.threads
        with pytest.raises(StoreError, match="the embedded store failed: .*dim"):
            await store.query("c", dense=[1.0, 0.0], limit=3)  # the engine refuses it; we translate its message
        store._collections["c"].shard = spy.shard  # type: ignore[assignment]
    finally:
        await store.aclose()



def _threads() -> set[str]:
    """This process's thread ids."""
    return set(os.listdir("/proc/self/task"))


def _search_threads_since(base: set[str]) -> Counter[str]:
    """The threads of the engine's search pools (one pool per open collection) that are not in ``base``, by name.
    By id, so that another test's pool still ending meanwhile (its threads end after its close returned) is
    neither counted nor hides a new one."""
    found: Counter[str] = Counter()
    for tid in _threads() - base:
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended since the folder was listed
            continue
        if name.startswith("edge-search"):
            found[name] += 1
    return found


def _search_threads_once(want: Counter[str], base: set[str]) -> Counter[str]:
    """:func:`_search_threads_since` once it is ``want``, or as it is after 60 s: a pool's threads name themselves
    as they start, and a closed pool's threads end after its close has returned, so on a busy machine either can
    lag behind the call (a liveness bound: the threads are checked, not the time)."""
    deadline = time.monotonic() + 60
    while (now := _search_threads_since(base)) != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return now


async def test_the_search_pool_is_sized_on_every_open_and_answers_alike(tmp_path: Path) -> None:
    """``qdrant.edge_search_threads`` sizes each collection's search pool when the collection is created and
    again on every open (the engine stores the size in the shard, and an open without it would keep the last
    one): 3 threads, then 1 on the same folder, then 3 again. The hits are the same whichever pool searched."""
    assert [search_pool_size(n) for n in (1, 2, 4, 5, 16)] == [1, 1, 1, 5, 16]
    vectors = np.random.default_rng(7).standard_normal((300, 8)).tolist()
    stored = tmp_path / "collections" / "c" / "shard" / "edge_config.json"
    answers = []
    base = _threads()
    for size in (3, 1, 3):
        assert _search_threads_once(Counter(), base) == Counter()  # the last store's pool has ended
        store = await EdgeStore.open(tmp_path, search_threads=size)
        try:
            if not await store.list_collections():
                await store.create_collection("c", dimensions=8, model="m")
                await store.upsert("c", [Chunk(f"d{i}", 0, f"text {i}", {}) for i in range(300)], vectors)
            want = Counter(f"edge-search-{i}" for i in range(size))
            assert _search_threads_once(want, base) == want
            assert json.loads(stored.read_text())["max_search_threads"] == size
            hits = await store.query("c", dense=vectors[5], limit=10)
            answers.append([(h.doc_id, h.score) for h in hits])
        finally:
            await store.aclose()
    assert answers[0][0][0] == "d5"
    assert answers[1] == answers[0] and answers[2] == answers[0]
