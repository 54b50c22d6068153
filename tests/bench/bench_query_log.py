"""The query log's cost per search (issue 39): CPU milliseconds of the API process per ``/v1/search``, with the
log off (every search still gets its id and short record), sampling 10 % and 100 %, beside a build with no
records at all; and what a locked database does to searches.

    python -m tests.bench.bench_query_log [--searches 2000] [--rounds 3] [--json docs/bench/query-log.json]
        [--postgres]

The app runs in this process (its lifespan and middleware, over httpx's ASGI transport) with the embedded store
in a temporary folder and a scripted embedding runner at the network edge (:mod:`tests.support.scripted_embed`):
the log's cost does not depend on the model, and a vLLM runner on the same 2 cores would add its noise to every
figure. The log's own part is also measured alone (``record`` and its batched writes, no HTTP or search around
them), where the differences are not lost in the noise of a whole search. CPU is ``time.process_time()`` over the searches and the final write of the buffer (every thread of the
process: the log's writes run in a worker thread), divided by the searches. The configurations alternate within
each round; the median over rounds is reported. ``--postgres`` also runs the 100 % configuration on a throwaway
PostgreSQL cluster (its server's CPU is another process's and not counted).

The locked case holds SQLite's write lock from another connection for the whole run: every search must answer
200, and the log drops its rows and counts them (``ragserve_query_log_dropped_total``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.bench.results import environment
from tests.bench.synthetic import summarize
from tests.support.app import app_client
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings

WORDS = ("vault", "keys", "rotation", "ferries", "orchards", "comets", "tickets", "invoices", "glaciers", "owls",
         "lanterns", "harbour", "copper", "mosses", "ledger", "tides", "pylons", "quarries", "saffron", "kilns")
CONFIGS: dict[str, dict[str, Any] | None] = {
    "no records": None,
    "log off (records only)": {"enabled": False},
    "log on, 10 %": {"enabled": True, "sample": 0.1},
    "log on, 100 %": {"enabled": True, "sample": 1.0},
}


def query(i: int) -> str:
    return " ".join(WORDS[(i * k + k) % len(WORDS)] for k in range(1, 5)) + f" {i}"


async def measure(name: str, query_log: dict[str, Any] | None, searches: int, *, url: str | None = None,
                  lock: bool = False) -> dict[str, Any]:
    runner = ScriptedEmbedder()
    with tempfile.TemporaryDirectory(prefix="ragserve-bench-qlog-") as tmp:
        sections: dict[str, Any] = {"query_cache": {"max_bytes": 0}}
        if query_log is not None:
            sections["query_log"] = {**query_log, **({"url": url} if url else {}), "write_timeout_s": 0.05}
        settings = scripted_settings(Path(tmp), **sections)
        async with app_client(settings, transports={"embedding": runner.transport}) as client:
            services = client.services  # type: ignore[attr-defined]
            if query_log is None:
                services.retrieval.quality = None
            r = await client.post("/v1/collections", json={"name": "bench"})
            assert r.status_code == 201, r.text
            docs = [{"id": f"d{i}", "text": query(i)} for i in range(200)]
            assert (await client.post("/v1/collections/bench/documents", json={"documents": docs})).status_code == 200
            for i in range(50):  # warm-up
                await client.post("/v1/search", json={"collection": "bench", "query": query(i), "mode": "dense"})
            await services.quality.flush()
            holder = None
            if lock:
                holder = sqlite3.connect(settings.query_log_path, isolation_level=None)
                holder.execute("BEGIN EXCLUSIVE")
            latencies: list[float] = []
            statuses: dict[int, int] = {}
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(searches):
                t = time.perf_counter()
                r = await client.post("/v1/search", json={"collection": "bench", "query": query(i + 50),
                                                          "top_k": 10, "mode": "dense"})
                latencies.append((time.perf_counter() - t) * 1000)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            await services.quality.flush()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            if holder is not None:
                holder.execute("ROLLBACK")
                holder.close()
            dropped = dict(services.metrics.quality._dropped)
    return {"config": name, "searches": searches, "cpu_ms_per_search": cpu * 1000 / searches,
            "wall_s": wall, "latency_ms": summarize(latencies), "statuses": statuses, "dropped": dropped}


async def log_alone(name: str, query_log: dict[str, Any], n: int, *, url: str | None = None) -> dict[str, Any]:
    """The log's own part, without HTTP or a search around it: ``record`` of a search with 10 hits, written in
    batches of ``BATCH`` (a flush every 0.5 s at 1,000 searches a second)."""
    from service.config.quality import QueryLogSettings
    from service.quality.log import open_quality_log
    from service.quality.metrics import QualityCollector
    from service.quality.records import RecordedHit
    from service.store.tenancy import Tenant

    settings = QueryLogSettings.model_validate({**query_log, **({"url": url} if url else {}), "max_pending": n})
    hits = [RecordedHit("bench", f"{i:032x}", f"doc-{i}", 0.9 - i / 100, None) for i in range(10)]
    tenant = Tenant("org", "acme")
    with tempfile.TemporaryDirectory(prefix="ragserve-bench-qlog-") as tmp:
        log = await open_quality_log(settings, Path(tmp) / "querylog.sqlite3", QualityCollector())
        try:
            cpu = time.process_time()
            for i in range(n):
                log.record(key_id="bench-key", tenant=tenant, query=query(i), collections=["bench"], mode="hybrid",
                           reranked=False, filter={"lang": "en"}, hits=hits,
                           timings_ms={"embed": 3.2, "search": 1.1, "total": 4.5})
                if (i + 1) % BATCH == 0:
                    await log.flush()
            await log.flush()
            cpu = time.process_time() - cpu
        finally:
            await log.aclose()
    return {"config": name, "records": n, "cpu_us_per_search": round(cpu * 1e6 / n, 2)}


BATCH = 500


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    configs = dict(CONFIGS)
    url = None
    cluster = None
    if args.postgres:
        from tests.support.postgres import running_postgres

        cluster = running_postgres(durable=True)
        url = cluster.__enter__().create_database()
    try:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
        if url:
            runs["log on, 100 %, PostgreSQL"] = []
        for round_ in range(args.rounds):
            for name, cfg in configs.items():
                runs[name].append(await measure(name, cfg, args.searches))
                print(f"round {round_ + 1} {name}: {runs[name][-1]['cpu_ms_per_search']:.3f} CPU-ms/search",
                      flush=True)
            if url:
                name = "log on, 100 %, PostgreSQL"
                runs[name].append(await measure(name, {"enabled": True, "sample": 1.0}, args.searches, url=url))
                print(f"round {round_ + 1} {name}: {runs[name][-1]['cpu_ms_per_search']:.3f} CPU-ms/search",
                      flush=True)
        locked = await measure("log on, 100 %, database locked", {"enabled": True}, args.searches // 4, lock=True)
        alone = []
        for name, cfg in configs.items():
            if cfg is not None:
                alone.append(await log_alone(name, cfg, args.searches * 10))
        if url:
            alone.append(await log_alone("log on, 100 %, PostgreSQL", {"enabled": True}, args.searches * 10,
                                         url=url))
    finally:
        if cluster is not None:
            cluster.__exit__(None, None, None)
    base = statistics.median(r["cpu_ms_per_search"] for r in runs["no records"])
    table = []
    for name, rs in runs.items():
        cpu = statistics.median(r["cpu_ms_per_search"] for r in rs)
        p50 = statistics.median(r["latency_ms"]["p50"] for r in rs)
        table.append({"config": name, "cpu_ms_per_search": round(cpu, 4), "over_no_records_ms": round(cpu - base, 4),
                      "p50_ms": round(p50, 3), "rounds": [round(r["cpu_ms_per_search"], 4) for r in rs]})
    return {"command": "python -m tests.bench.bench_query_log " + " ".join(args.argv), "environment": environment(),
            "table": table, "log_alone": alone, "locked": locked}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--searches", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args, _ = parser.parse_known_args()
    import sys

    args.argv = sys.argv[1:]
    result = asyncio.run(main_async(args))
    print(f"\n{'config':<34}{'CPU-ms/search':>15}{'over none':>12}{'p50 ms':>10}")
    for row in result["table"]:
        print(f"{row['config']:<34}{row['cpu_ms_per_search']:>15.3f}{row['over_no_records_ms']:>12.3f}"
              f"{row['p50_ms']:>10.2f}")
    print(f"\nthe log alone (record + batched writes of {BATCH}), CPU microseconds per search:")
    for row in result["log_alone"]:
        print(f"  {row['config']:<34}{row['cpu_us_per_search']:>10.1f}")
    locked = result["locked"]
    print(f"\nlocked database: {locked['searches']} searches, statuses {locked['statuses']}, dropped "
          f"{locked['dropped']}, p50 {locked['latency_ms']['p50']:.2f} ms")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
