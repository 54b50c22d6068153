"""The query-embedding cache (issue 20): a stream of ``/v1/search`` calls with repeats, cache on against cache off.

    python -m tests.bench.bench_query_cache --embed-url http://127.0.0.1:8101 [--profile minilm]
        [--searches 400] [--repeat-rate 0.3] [--docs 200] [--rounds 2] [--json query-cache.json]
    python -m tests.bench.bench_query_cache --scripted      # the plumbing alone: a scripted runner, no vLLM

The app runs in this process (its lifespan and middleware, over httpx's ASGI transport, as the tests run it),
with the embedded store in a temporary folder and the embedding runner at ``--embed-url`` (default: the
``RAGSERVE_RUNNERS__EMBED_URL`` / ``RAGSERVE_PROFILE`` of the environment, as ``ragserve serve`` reads them).
Each round builds one app per config (cache off, then on: a cold cache each time), indexes ``--docs`` short
documents through the runner, and sends the same stream of searches, one at a time: each search is a repeat
of an earlier query of the stream (uniformly chosen) with probability ``--repeat-rate``, else a new one. Dense
mode, no rerank (unless ``--rerank``), so the difference is the embedding.

Printed (and written to ``--json``) per config: the hit rate (``timings_ms`` has ``embed_cache`` instead of ``embed``), and round-trip
milliseconds of the hits, of the misses and of all searches (p50 / p90 / p99 / mean), beside the server's own
``embed`` timing of each. With cache off, ``repeat`` is the same figures for the searches that were repeats
(misses there). ``--scripted`` answers from :mod:`tests.support.scripted_embed` instead of a runner: it checks
the plumbing and says nothing about a runner's latency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from service.config import Settings
from tests.bench.results import environment
from tests.bench.synthetic import summarize
from tests.support.app import API_KEY, app_client
from tests.support.runners import free_port

COLLECTION = "bench"
WORDS = ("vault", "keys", "rotation", "ferries", "orchards", "comets", "tickets", "invoices", "glaciers", "owls",
         "lanterns", "harbour", "copper", "mosses", "ledger", "tides", "pylons", "quarries", "saffron", "kilns")


def query_stream(n: int, repeat_rate: float, seed: int) -> tuple[list[str], list[bool]]:
    """``n`` queries, and for each whether it repeats an earlier one of the stream."""
    rng = random.Random(seed)
    seen: list[str] = []
    stream: list[str] = []
    repeats: list[bool] = []
    for i in range(n):
        if seen and rng.random() < repeat_rate:
            stream.append(rng.choice(seen))
            repeats.append(True)
        else:
            words = rng.sample(WORDS, 3)
            q = f"what does note {i} say about {words[0]}, {words[1]} and {words[2]}?"
            seen.append(q)
            stream.append(q)
            repeats.append(False)
    return stream, repeats


def documents(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"id": f"d{i}", "text": f"note {i}: " + " ".join(rng.choices(WORDS, k=12))} for i in range(n)]


def settings_for(data_dir: Path, args: argparse.Namespace, max_bytes: int) -> Settings:
    """The environment's settings (as ``ragserve serve`` reads them), with the bench's own data folder, key and
    cache bound, generation off, and the profile and runner URL of the arguments where given."""
    values: dict[str, Any] = {"data_dir": data_dir, "api_keys": [API_KEY], "query_cache": {"max_bytes": max_bytes},
                              "generation": {"enabled": False}}
    if args.profile:
        values["profile"] = args.profile
    if args.scripted:
        values["profile"] = "minilm"
        values["runners"] = {"embed_url": f"http://127.0.0.1:{free_port()}"}  # never reached: the transport answers
        values["qdrant"] = {"edge_process": False}
    elif args.embed_url:
        values["runners"] = {"embed_url": args.embed_url}
    return Settings(**values)


def transports(args: argparse.Namespace) -> Mapping[str, httpx.AsyncBaseTransport] | None:
    if not args.scripted:
        return None
    from tests.support.scripted_embed import ScriptedEmbedder

    return {"embedding": ScriptedEmbedder().transport}


async def run_config(args: argparse.Namespace, cache: bool, stream: list[str], repeats: list[bool],
                     docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One app, the whole stream: each search's round trip, server embed time and whether it hit."""
    max_bytes = args.max_bytes if cache else 0
    with tempfile.TemporaryDirectory(prefix="bench-query-cache-") as tmp:
        settings = settings_for(Path(tmp), args, max_bytes)
        async with app_client(settings, transports=transports(args)) as client:
            r = await client.post("/v1/collections", json={"name": COLLECTION, "sparse": False})
            assert r.status_code == 201, r.text
            for i in range(0, len(docs), 100):
                r = await client.post(f"/v1/collections/{COLLECTION}/documents", json={"documents": docs[i:i + 100]})
                assert r.status_code == 200, r.text
            rerank = {"enabled": args.rerank}
            for i in range(args.warmup):  # connections and code paths warm; texts the stream never sends
                await client.post("/v1/search", json={"collection": COLLECTION, "query": f"warm-up {i}",
                                                      "mode": "dense", "rerank": rerank})
            samples = []
            for query, repeat in zip(stream, repeats, strict=True):
                t = time.perf_counter()
                r = await client.post("/v1/search", json={"collection": COLLECTION, "query": query, "top_k": 10,
                                                          "mode": "dense", "rerank": rerank})
                ms = (time.perf_counter() - t) * 1000
                assert r.status_code == 200, r.text
                timings = r.json()["timings_ms"]
                hit = "embed_cache" in timings  # the vector's stage: embed_cache (a hit) or embed (the runner)
                samples.append({"ms": ms, "embed_ms": timings["embed_cache" if hit else "embed"], "hit": hit,
                                "repeat": repeat})
            return samples


def report(cache: bool, samples: list[dict[str, Any]]) -> dict[str, Any]:
    hits = [s for s in samples if s["hit"]]
    misses = [s for s in samples if not s["hit"]]
    out: dict[str, Any] = {
        "cache": "on" if cache else "off",
        "searches": len(samples),
        "hit_rate": len(hits) / len(samples) if samples else 0.0,
        "hit_ms": summarize([s["ms"] for s in hits]),
        "miss_ms": summarize([s["ms"] for s in misses]),
        "all_ms": summarize([s["ms"] for s in samples]),
        "server_embed_ms": {"hit": summarize([s["embed_ms"] for s in hits]),
                            "miss": summarize([s["embed_ms"] for s in misses])},
    }
    if not cache:
        out["repeat_ms"] = summarize([s["ms"] for s in samples if s["repeat"]])
    return out


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    stream, repeats = query_stream(args.searches, args.repeat_rate, args.seed)
    docs = documents(args.docs, args.seed)
    collected: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for round_ in range(args.rounds):
        for cache in (False, True):
            collected[cache] += await run_config(args, cache, stream, repeats, docs)
            print(f"round {round_ + 1}/{args.rounds} cache {'on' if cache else 'off'}: done", flush=True)
    configs = [report(cache, collected[cache]) for cache in (False, True)]
    return {
        "scenario": "query-cache",
        "runner": "scripted" if args.scripted else (args.embed_url or "from the environment"),
        "profile": settings_for(Path(tempfile.gettempdir()), args, 0).profile,
        "searches": args.searches, "rounds": args.rounds, "docs": args.docs,
        "repeat_rate": args.repeat_rate, "stream_repeats": sum(repeats) / len(repeats) if repeats else 0.0,
        "max_bytes": args.max_bytes, "rerank": args.rerank,
        "configs": configs,
        "environment": environment(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--embed-url", help="the embedding runner (default: RAGSERVE_RUNNERS__EMBED_URL)")
    parser.add_argument("--profile", help="the model profile (default: RAGSERVE_PROFILE)")
    parser.add_argument("--scripted", action="store_true", help="a scripted runner in place of vLLM (plumbing only)")
    parser.add_argument("--searches", type=int, default=400)
    parser.add_argument("--repeat-rate", type=float, default=0.3)
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="off/on pairs, each on fresh apps (a cold cache)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--max-bytes", type=int, default=64 << 20, help="the cache bound when on")
    parser.add_argument("--rerank", action="store_true", help="rerank too (profiles with a reranker)")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args))
    for c in result["configs"]:
        print(f"cache {c['cache']:3s}  hit rate {c['hit_rate']:6.1%}  hit p50 {c['hit_ms']['p50']:7.2f} ms  "
              f"miss p50 {c['miss_ms']['p50']:7.2f} ms  mean {c['all_ms']['mean']:7.2f} ms  "
              f"(server embed p50: hit {c['server_embed_ms']['hit']['p50']:.3f}, "
              f"miss {c['server_embed_ms']['miss']['p50']:.3f} ms)")
    text = json.dumps(result, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
