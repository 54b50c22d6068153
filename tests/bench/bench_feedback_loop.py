"""The feedback loop on SciFact at full scale (issue 39): ``--queries`` test queries searched through the running
service (minilm profile, the embedded store, the query log on), feedback from SciFact's qrels (each relevant hit
+1, a non-relevant top hit -1), then ``ragserve eval --from-log --a mode=dense --b mode=hybrid`` with the dataset,
so the report has the judged-only figures and the full-qrels figures of the same runs side by side.

    python -m tests.bench.bench_feedback_loop --embed-url http://127.0.0.1:18103 [--queries 200]
        [--search-mode dense] [--out docs/bench/feedback-loop]

The app runs in this process (uvicorn in a thread) with its data folder under ``--data-dir`` (default a temporary
one; pass a folder to keep the indexed corpus between runs: the corpus is indexed only when the collection is
empty). The command the report was made with, and the judged set's size, are printed and written beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from service.client import AsyncClient
from service.config import Settings
from service.evaluation.dataset import BeirDataset
from service.evaluation.run import ensure_indexed
from tests.support.app import API_KEY
from tests.support.server import live_server

SCIFACT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "scifact"


async def search_and_rate(url: str, dataset: BeirDataset, queries: int, mode: str) -> dict[str, int]:
    qrels = dataset.qrels("test")
    texts = dataset.queries("test")
    chosen = sorted(texts, key=int)[:queries]
    counts = {"searches": 0, "+1": 0, "-1": 0}
    async with AsyncClient(url, API_KEY, timeout=600) as client:
        await ensure_indexed(client, dataset, "scifact", concurrency=2)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=600) as http:
        for qid in chosen:
            r = await http.post("/v1/search", json={"collection": "scifact", "query": texts[qid], "top_k": 10,
                                                    "mode": mode})
            r.raise_for_status()
            body = r.json()
            counts["searches"] += 1
            ranked = list(dict.fromkeys(h["doc_id"] for h in body["hits"]))
            ratings = {d: 1 for d in ranked if d in qrels[qid]}
            if ranked and ranked[0] not in qrels[qid]:
                ratings[ranked[0]] = -1
            for doc, rating in ratings.items():
                f = await http.post("/v1/feedback", json={"search_id": body["search_id"], "doc_id": doc,
                                                          "rating": rating})
                f.raise_for_status()
                counts["+1" if rating > 0 else "-1"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embed-url", required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--search-mode", default="dense", help="the mode the rated searches use")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("docs/bench/feedback-loop"))
    args = parser.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="ragserve-feedback-loop-"))
    settings = Settings(profile="minilm", data_dir=data_dir, api_keys=[API_KEY], runners={"embed_url": args.embed_url},
                        query_log={"enabled": True})
    dataset = BeirDataset(SCIFACT)
    with live_server(settings) as url:
        counts = asyncio.run(search_and_rate(url, dataset, args.queries, args.search_mode))
        print(f"rated: {counts}", flush=True)
        command = [sys.executable, "-m", "service.cli", "eval", str(SCIFACT), "--from-log", "--a", "mode=dense",
                   "--b", "mode=hybrid", "--out", str(args.out), "--url", url]
        done = subprocess.run(command, env={"RAGSERVE_API_KEY": API_KEY, "PATH": "/usr/bin:/bin"}, text=True,
                              capture_output=True)
        print(done.stdout)
        if done.returncode != 0:
            raise SystemExit(done.stderr)
    report = json.loads(args.out.with_suffix(".json").read_text())
    report["run"] = {"command": "python -m tests.bench.bench_feedback_loop " + " ".join(sys.argv[1:]),
                     "rated_searches_mode": args.search_mode, **counts}
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
