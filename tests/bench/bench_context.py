"""What ``POST /v1/context`` adds over the ``/v1/search`` it makes (issue 36), at about 20,000 chunks.

    python -m tests.bench.bench_context [--docs 2200] [--queries 200] [--json context.json]

The app runs in this process (its lifespan, over httpx's ASGI transport, as the tests run it), with the embedded
store in a temporary folder and the embedding runner scripted (:mod:`tests.support.scripted_embed`: a vector per
text, no vLLM), so what is measured is ragserve's own work. ``--docs`` documents of about 300 words are indexed
through an ingest job with the default token chunking cut to 64 tokens (overlap 32), about 9 chunks each.

For each query (words drawn from the corpus), a hybrid ``/v1/search`` with ``top_k`` 50 and a ``/v1/context``
with the same search (``candidates`` 50) and a 512-token budget, with ``neighbours`` 0 and 2, one at a time.
Reported: the p50 / p90 of the time ``/v1/context`` adds over its own search (its ``timings_ms.total`` less
``timings_ms.retrieve``: merge, the neighbour read, packing and counting), of the neighbour read alone, and of
the round trips of both routes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from service.config import Settings
from tests.bench.results import environment
from tests.bench.synthetic import summarize
from tests.support.app import app_client, wait_for_job
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings

WORDS = ("vault keys rotation ferries orchards comets tickets invoices glaciers owls lanterns harbour copper mosses "
         "ledger tides pylons quarries saffron kilns basalt delta magma photon neuron plasma crystal orbit nebula "
         "pulsar heron salmon enzyme protein lattice marrow cortex synapse tissue river").split()


def corpus(n: int, seed: int) -> bytes:
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))).capitalize() + "."
                     for _ in range(24)]
        lines.append(json.dumps({"_id": f"d{i}", "title": f"Document {i}", "text": " ".join(sentences)}))
    return ("\n".join(lines) + "\n").encode()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        settings: Settings = scripted_settings(Path(tmp))
        embedder = ScriptedEmbedder()
        async with app_client(settings, transports={"embedding": embedder.transport}, with_worker=True) as client:
            assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
            started = time.perf_counter()
            r = await client.post("/v1/collections/kb/ingest", files={"files": ("c.jsonl", corpus(args.docs, 7))},
                                  data={"options": json.dumps({"chunking": "tokens", "chunk_tokens": 64})})
            assert r.status_code == 202, r.text
            job = await wait_for_job(client, r.json()["id"], timeout_s=3600)
            assert job["state"] == "succeeded", job
            chunks = (await client.get("/v1/collections/kb")).json()["points"]
            indexed_s = time.perf_counter() - started
            rng = random.Random(11)
            queries = [" ".join(rng.choice(WORDS) for _ in range(4)) for _ in range(args.queries)]
            rows = {"search": [], "context_n0": [], "context_n2": []}
            added: dict[str, list[float]] = {"context_n0": [], "context_n2": []}
            neighbour_read: list[float] = []
            for q in queries:
                t = time.perf_counter()
                r = await client.post("/v1/search", json={"collection": "kb", "query": q, "top_k": 50})
                rows["search"].append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200, r.text
                for n in (0, 2):
                    t = time.perf_counter()
                    r = await client.post("/v1/context", json={"collection": "kb", "query": q, "budget_tokens": 512,
                                                               "candidates": 50, "neighbours": n})
                    rows[f"context_n{n}"].append((time.perf_counter() - t) * 1000)
                    assert r.status_code == 200, r.text
                    timings = r.json()["timings_ms"]
                    added[f"context_n{n}"].append(timings["total"] - timings["retrieve"])
                    if n:
                        neighbour_read.append(timings["neighbours"])
    return {
        "benchmark": "context", "command": "python -m tests.bench.bench_context " + " ".join(
            f"--{k} {v}" for k, v in (("docs", args.docs), ("queries", args.queries))),
        "environment": environment(), "chunks": chunks, "indexed_s": round(indexed_s, 1),
        "added_over_search_ms": {k: summarize(v) for k, v in added.items()},
        "neighbour_read_ms": summarize(neighbour_read),
        "round_trip_ms": {k: summarize(v) for k, v in rows.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=2200)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
