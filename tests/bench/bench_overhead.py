"""ragserve's own CPU per dense search, layer by layer, in the API process and in the store's process.

The embedding runner is an ``httpx.MockTransport`` answering a fixed 1024-dim vector at once (the query cache is
off: every search embeds), the collection holds 500 points, and each layer is timed alone, ``--calls`` calls in
sequence after 20 of warm-up. CPU is counted per process: the API process's from ``time.process_time()`` (all its
threads), the store process's from its threads' ``/proc/<pid>/task/*/schedstat`` (nanoseconds on a CPU).

First with the store in this process (``qdrant.edge_process: false``):

- an ``httpx`` POST to the mock transport and its ``.json()`` (the client library's own cost per runner call);
- ``EmbeddingClient.embed_query`` (lanes, pool, deadline, retries, base64 decode on top of that);
- ``engine: EdgeShard.query``: the engine's own search (the binding's call with a prepared request), which is
  not ragserve's to cut;
- ``EdgeStore.query``, in-process: the engine and the store layer around it (request, filter, hits).

Then on the same folder as it is served, the store in its own process (``qdrant.edge_process: true``, the
default), where the API process and the store process each report their CPU per call:

- ``ProcessStore.query``: the client's pickling and framing, the store process's dispatch and the engine;
- ``SearchService.search``: describe, embed, store, tracing spans, stage metrics;
- ``GET /health`` and ``POST /v1/search`` through the whole ASGI app (middleware, auth, body reading and
  validation, the response, JSON), called as an ASGI server calls it (one scope, a body, the messages sent);
- ``POST /v1/search``, 32 in flight: 32 callers in a closed loop, ``4 x --calls`` searches in all, as an API
  process serves under load. Its loop never idles then, and on this virtual machine a thread that sleeps and is
  woken spends about 0.28 ms more CPU on the same work after it (a request's stub that blocks 1.2 ms in
  ``time.sleep`` costs 0.57 ms of CPU against 0.29 with none): one at a time, each store call pays that in both
  processes; under load, nobody does. The issue's gate is this row (searches at concurrency 32);
- ``POST /v1/search`` over ``httpx``'s ASGI transport, as before (its client's own CPU is in the figure);
- ``POST /v1/search`` with the embedding client's ``embed_query``, the store's ``query`` or both replaced by
  coroutines answering at once: what each part costs in place (a part timed alone in a loop runs with hot caches
  and costs less than inside a search), and with both stubbed the API layer and the search service's own
  bookkeeping alone, the figure least blurred by the others.

Logging is configured as ``ragserve serve`` configures it (text lines at INFO, into ``/dev/null``): the access
line of every request is part of what a search costs.

Also ``ProcessStore round trip (ping)``: the pipe's floor (pickling, framing, both loops, no engine). The store
process's figures say too what the engine's own search threads (``edge-search-*``) spent of them.

``ragserve's own CPU per dense search`` = the API process's and the store process's CPU per ``POST /v1/search``
less the engine's search: its search threads' CPU in the store process, and the CPU its call costs the calling
thread (from the in-process row, where the engine runs hot: if anything too little is taken off).

    python -m tests.bench.bench_overhead [--calls 300]
    python -m tests.bench.bench_overhead --compare REF [--rounds 3]

``--compare`` runs this same measurement on the tree of ``REF`` (a commit, ``git archive``-d to a temporary
folder) and on this tree, alternating, ``--rounds`` times each, and prints both side by side (each figure the
median of its rounds): before and after from one run, on the same machine and the same load.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from service.config import Settings
from service.observability.logs import configure_logging
from service.search.service import SearchQuery
from tests.bench.synthetic import synthetic_corpus
from tests.support.app import API_KEY, app_client

DIMS = 1024
POINTS = 500
SEARCH = "POST /v1/search (dense)"
IN_FLIGHT = 32
SEARCH_C32 = f"POST /v1/search (dense), {IN_FLIGHT} in flight"
ENGINE = "engine: EdgeShard.query (in-process)"
API_ALONE = "POST /v1/search, embed and store stubbed"
ROOT = Path(__file__).resolve().parents[2]


def _embedding_body(inputs: int) -> bytes:
    v = np.random.default_rng(0).standard_normal(DIMS).astype("<f4")
    v /= np.linalg.norm(v)
    item = base64.b64encode(v.tobytes()).decode()
    return json.dumps({"object": "list", "model": "Qwen/Qwen3-Embedding-0.6B",
                       "data": [{"object": "embedding", "index": i, "embedding": item} for i in range(inputs)],
                       "usage": {"prompt_tokens": 8 * inputs, "total_tokens": 8 * inputs}}).encode()


BODIES = [b""] + [_embedding_body(n) for n in range(1, 65)]
"""The runner's answers, built beforehand for 1 to 64 inputs (each the same vector): answering costs the API
process (where the mock runs) only the request's parse."""


def _runner(request: httpx.Request) -> httpx.Response:
    inputs = len(json.loads(request.content)["input"])
    return httpx.Response(200, content=BODIES[inputs], headers={"content-type": "application/json"})


def process_cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds of every live thread of ``pid`` (``schedstat``: nanoseconds, not clock ticks), and of those
    the engine's own search threads (``edge-search-*``, Qdrant Edge's pool) spent."""
    total = engine = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        total += ns
        if name.startswith("edge-search"):
            engine += ns
    return total / 1e9, engine / 1e9


async def timed(call: Callable[[], Awaitable[Any]], n: int = 300, warmup: int = 20,
                store_pid: int | None = None) -> dict[str, float]:
    """CPU milliseconds per call of this process and (with ``store_pid``) of the store's, and wall milliseconds,
    over ``n`` calls in sequence."""
    for _ in range(warmup):
        await call()
    store = process_cpu_s(store_pid) if store_pid else (0.0, 0.0)
    cpu, thread, wall = time.process_time(), time.thread_time(), time.perf_counter()
    for _ in range(n):
        await call()
    out = {"cpu_ms": (time.process_time() - cpu) * 1000 / n, "thread_cpu_ms": (time.thread_time() - thread) * 1000 / n,
           "wall_ms": (time.perf_counter() - wall) * 1000 / n}
    if store_pid:
        total, engine = process_cpu_s(store_pid)
        out["store_cpu_ms"] = (total - store[0]) * 1000 / n
        out["store_engine_threads_ms"] = (engine - store[1]) * 1000 / n
    return out


async def timed_in_flight(call: Callable[[], Awaitable[Any]], n: int, concurrency: int,
                          store_pid: int) -> dict[str, float]:
    """:func:`timed` for ``concurrency`` callers at once, each calling in a loop (a closed loop: ``n`` calls in
    all), as an API process serves under load: its loop never idles, so no call pays for waking it."""
    async def caller(calls: int) -> None:
        for _ in range(calls):
            await call()

    per = max(1, n // concurrency)
    await asyncio.gather(*(caller(2) for _ in range(concurrency)))
    store = process_cpu_s(store_pid)
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(caller(per) for _ in range(concurrency)))
    calls = per * concurrency
    total, engine = process_cpu_s(store_pid)
    return {"cpu_ms": (time.process_time() - cpu) * 1000 / calls, "wall_ms": (time.perf_counter() - wall) * 1000 / calls,
            "store_cpu_ms": (total - store[0]) * 1000 / calls,
            "store_engine_threads_ms": (engine - store[1]) * 1000 / calls}


def _settings(data_dir: Path, *, edge_process: bool) -> Settings:
    return Settings(profile="qwen3", data_dir=data_dir, api_keys=[API_KEY], generation={"enabled": False},
                    qdrant={"edge_process": edge_process}, query_cache={"max_bytes": 0},  # the same query n times
                    runners={"embed_url": "http://embed.test", "rerank_url": "http://rerank.test"})


def _asgi_caller(client: httpx.AsyncClient, method: str, path: str,
                 body: bytes = b"") -> Callable[[], Awaitable[None]]:
    """One request straight into the app, as uvicorn hands it over: no HTTP client, no transport."""
    asgi = client._transport.app  # type: ignore[attr-defined]
    headers = [(b"host", b"ragserve.test"), (b"authorization", f"Bearer {API_KEY}".encode()),
               (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    never = asyncio.Event()

    async def call() -> None:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
                 "headers": list(headers), "client": ("127.0.0.1", 50000), "server": ("ragserve.test", 80)}
        sent = False
        status = 0

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await never.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await asgi(scope, receive, send)
        assert status == 200, status

    return call


@asynccontextmanager
async def _app(data_dir: Path, *, edge_process: bool) -> AsyncIterator[httpx.AsyncClient]:
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    with open(os.devnull, "w") as devnull:  # noqa: ASYNC230 - /dev/null opens at once
        configure_logging("text", "INFO", stream=devnull)  # as `ragserve serve` does: one access line a request
        try:
            async with app_client(_settings(data_dir, edge_process=edge_process),
                                  transports={"embedding": httpx.MockTransport(_runner)}) as client:
                yield client
        finally:
            root.handlers[:] = saved[0]
            root.setLevel(saved[1])


async def measure(n: int = 300) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    async with httpx.AsyncClient(transport=httpx.MockTransport(_runner)) as http:
        async def post() -> Any:
            return (await http.post("http://runner.test/v1/embeddings", json={"input": ["q"], "model": "m"})).json()
        out["httpx post + json (mock)"] = await timed(post, n)
    body = {"collection": "kb", "query": "what is x", "top_k": 10, "mode": "dense", "rerank": {"enabled": False}}
    query = SearchQuery(collection="kb", query="what is x", top_k=10, mode="dense", rerank=False)
    with tempfile.TemporaryDirectory() as tmp:
        async with _app(Path(tmp), edge_process=False) as client:
            (await client.post("/v1/collections", json={"name": "kb", "dimensions": DIMS})).raise_for_status()
            corpus = synthetic_corpus(POINTS, DIMS)
            docs = [{"id": f"p{i}", "text": corpus.texts[i], "vector_base64": b}
                    for i, b in zip(range(POINTS), corpus.vectors_base64(0, POINTS), strict=True)]
            (await client.post("/v1/collections/kb/documents", json={"documents": docs})).raise_for_status()
            services = client.services  # type: ignore[attr-defined]
            vector = await services.embedder.embed_query("q", dimensions=DIMS)
            out["EmbeddingClient.embed_query"] = await timed(
                lambda: services.embedder.embed_query("what is x", dimensions=DIMS), n)
            out[ENGINE] = await timed(_engine_call(services.store, vector), n)
            out["EdgeStore.query (in-process)"] = await timed(
                lambda: services.store.query("kb", dense=vector, sparse=None, limit=10), n)
        async with _app(Path(tmp), edge_process=True) as client:
            services = client.services  # type: ignore[attr-defined]
            pid = services.store._process.pid
            out["ProcessStore round trip (ping)"] = await timed(lambda: services.store._run("ping"), n, store_pid=pid)
            out["ProcessStore.query"] = await timed(
                lambda: services.store.query("kb", dense=vector, sparse=None, limit=10), n, store_pid=pid)
            out["SearchService.search (dense)"] = await timed(lambda: services.search.search(query), n, store_pid=pid)
            out["GET /health (ASGI)"] = await timed(_asgi_caller(client, "GET", "/health"), n, store_pid=pid)
            out[SEARCH] = await timed(_asgi_caller(client, "POST", "/v1/search", json.dumps(body).encode()), n,
                                      store_pid=pid)
            out[SEARCH_C32] = await timed_in_flight(
                _asgi_caller(client, "POST", "/v1/search", json.dumps(body).encode()), 4 * n, IN_FLIGHT, pid)
            out["POST /v1/search via httpx ASGITransport"] = await timed(
                lambda: client.post("/v1/search", json=body), n, store_pid=pid)
            # The last rows: each part's cost in place, by stubbing the others (the app is closed after them).
            hits = await services.store.query("kb", dense=vector, sparse=None, limit=10)
            store_query, embed_query = services.store.query, services.embedder.embed_query
            search = _asgi_caller(client, "POST", "/v1/search", json.dumps(body).encode())
            services.embedder.embed_query = _returning(vector)
            out["POST /v1/search, embed stubbed"] = await timed(search, n, store_pid=pid)
            services.store.query, services.embedder.embed_query = _returning(hits), embed_query
            out["POST /v1/search, store stubbed"] = await timed(search, n, store_pid=pid)
            services.embedder.embed_query = _returning(vector)
            out[API_ALONE] = await timed(search, n, store_pid=pid)
            services.store.query = store_query
    return out


def _returning(value: Any) -> Callable[..., Awaitable[Any]]:
    async def call(*args: Any, **kwargs: Any) -> Any:
        return value

    return call


def _engine_call(store: Any, vector: list[float]) -> Callable[[], Awaitable[Any]]:
    """The engine's search alone: the binding's ``query`` with its request built once, on this thread."""
    import qdrant_edge as qe

    shard = store._collections["kb"].shard
    request = qe.QueryRequest(limit=10, query=qe.Query.Nearest(list(vector), using="dense"), filter=None,
                              with_payload=True, params=store._params)

    async def call() -> Any:
        return shard.query(request)

    return call


def own_cpu_ms(result: dict[str, dict[str, float]], row: str = SEARCH) -> dict[str, float]:
    """ragserve's own CPU per dense search: the API process's and the store process's per ``POST /v1/search``
    (``row``: one at a time, or :data:`SEARCH_C32`), less the engine's search. The engine's part of the store
    process is what its search threads spent there (measured in place, per thread) and what its call costs the
    calling thread (measured alone, in this process, where it runs hot: so if anything too little is taken off,
    and ragserve's own share is overstated alike before and after)."""
    search = result[row]
    engine = search["store_engine_threads_ms"] + result[ENGINE]["thread_cpu_ms"]
    return {"api": search["cpu_ms"], "store": search["store_cpu_ms"] - engine, "engine": engine,
            "total": search["cpu_ms"] + search["store_cpu_ms"] - engine}


def in_place_ms(result: dict[str, dict[str, float]]) -> dict[str, float]:
    """The API process's CPU per search by part, each as what stubbing it saves inside a whole search."""
    search = result[SEARCH]["cpu_ms"]
    return {"embedding call": search - result["POST /v1/search, embed stubbed"]["cpu_ms"],
            "store call": search - result["POST /v1/search, store stubbed"]["cpu_ms"],
            "API layer, search service": result[API_ALONE]["cpu_ms"]}


def report(result: dict[str, dict[str, float]]) -> str:
    lines = [f"{'layer':42s} {'API cpu ms':>10s} {'store cpu ms':>12s} {'(engine thr.)':>13s} {'wall ms':>8s}"]
    lines += [f"{k:42s} {v['cpu_ms']:10.3f} {_store(v):>12s} {_store(v, 'store_engine_threads_ms'):>13s} "
              f"{v['wall_ms']:8.3f}" for k, v in result.items()]
    api = result[SEARCH]["cpu_ms"] - result["SearchService.search (dense)"]["cpu_ms"]
    own = own_cpu_ms(result)
    lines.append(f"API layer over SearchService.search: {api:.3f} ms CPU per search")
    places = in_place_ms(result)
    lines.append("in place, the API process's CPU per search: " + ", ".join(f"{k} {v:.3f}" for k, v in places.items()))
    lines.append(f"ragserve's own CPU per dense search: {own['total']:.3f} ms (API process {own['api']:.3f} + "
                 f"store process {own['store'] + own['engine']:.3f} - the engine's search {own['engine']:.3f}: its "
                 f"threads there {result[SEARCH]['store_engine_threads_ms']:.3f}, its call's own thread "
                 f"{result[ENGINE]['thread_cpu_ms']:.3f})")
    if SEARCH_C32 in result:
        own = own_cpu_ms(result, SEARCH_C32)
        lines.append(f"the same, {IN_FLIGHT} in flight: {own['total']:.3f} ms (API process {own['api']:.3f} + store "
                     f"process {own['store'] + own['engine']:.3f} - the engine's search {own['engine']:.3f})")
    return "\n".join(lines)


def _store(v: dict[str, float], key: str = "store_cpu_ms") -> str:
    return f"{v[key]:.3f}" if key in v else "-"


# --- before and after in one run ----------------------------------------------------------------------------

def _tree_of(ref: str, dest: Path) -> Path:
    """The files of ``ref`` (what its bench imports), unpacked in ``dest``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "service", "indexer", "tests"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def _measure_in(tree: Path, calls: int) -> dict[str, dict[str, float]]:
    """This file's measurement run on ``tree``'s code, in a fresh interpreter (its store child too)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = ("import runpy, sys; sys.argv = [sys.argv[0], '--json', '--calls', sys.argv[1]]; "
            f"runpy.run_path({str(Path(__file__).resolve())!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code, str(calls)], cwd=tree, env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def compare(ref: str, rounds: int, calls: int) -> str:
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": _tree_of(ref, Path(tmp)), "after": ROOT}
        for r in range(rounds):
            for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                runs[side].append(_measure_in(trees[side], calls))
                print(f"round {r + 1}/{rounds} {side}: own CPU {own_cpu_ms(runs[side][-1])['total']:.3f} ms",
                      file=sys.stderr, flush=True)
    med = {side: _median(results) for side, results in runs.items()}
    head = (f"{'layer (CPU ms per call)':42s} {'before API':>10s} {'store':>7s} {'after API':>10s} {'store':>7s}")
    lines = [f"before: {ref}, after: this tree; median of {rounds} alternating rounds of {calls} calls", head]
    for layer in med["after"]:
        b, a = med["before"].get(layer, {}), med["after"][layer]
        lines.append(f"{layer:42s} {b.get('cpu_ms', float('nan')):10.3f} {_store(b) if b else '-':>7s} "
                     f"{a['cpu_ms']:10.3f} {_store(a):>7s}")
    lines.append("")
    lines.append(f"{'ragserve own CPU per dense search':42s} {'before':>10s} {'after':>10s} {'after/before':>12s}")
    places = {side: _median_of(runs[side], in_place_ms) for side in runs}
    own = {side: _median_of(runs[side], own_cpu_ms) for side in runs}
    for part, label in (("api", "API process"), ("store", "store process less the engine"),
                        ("engine", "(the engine's search, excluded)"), ("total", "total")):
        b, a = own["before"][part], own["after"][part]
        lines.append(f"{label:42s} {b:10.3f} {a:10.3f} {a / b:12.2f}")
        if part == "api":
            for place in places["after"]:
                b, a = places["before"][place], places["after"][place]
                lines.append(f"{'  in place: ' + place:42s} {b:10.3f} {a:10.3f} {a / b:12.2f}")
    own = {side: _median_of(runs[side], lambda r: own_cpu_ms(r, SEARCH_C32)) for side in runs}
    lines.append(f"{'the same, ' + str(IN_FLIGHT) + ' in flight':42s}")
    for part, label in (("api", "API process"), ("store", "store process less the engine"),
                        ("engine", "(the engine's search, excluded)"), ("total", "total")):
        b, a = own["before"][part], own["after"][part]
        lines.append(f"{'  ' + label:42s} {b:10.3f} {a:10.3f} {a / b:12.2f}")
    return "\n".join(lines)


def _median(results: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {layer: {k: statistics.median(r[layer][k] for r in results) for k in results[0][layer]}
            for layer in results[0]}


def _median_of(results: list[dict[str, dict[str, float]]],
               figures: Callable[[dict[str, dict[str, float]]], dict[str, float]]) -> dict[str, float]:
    each = [figures(r) for r in results]
    return {k: statistics.median(e[k] for e in each) for k in each[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--compare", metavar="REF", help="also measure the tree of this commit, alternating")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = parser.parse_args()
    if args.compare:
        print(f"cores: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.1f}")
        print(compare(args.compare, args.rounds, args.calls))
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        return
    result = asyncio.run(measure(args.calls))
    print(json.dumps(result) if args.json else report(result))


if __name__ == "__main__":
    main()
