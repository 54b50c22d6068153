"""The benchmark suite: each scenario prints a table, writes ``<scenario>.json`` and draws ``<scenario>.png``.

    python -m tests.bench [SCENARIO ...] [--out docs/bench] [--runner-urls EMBED,RERANK,MINILM]
        [--peers-python /work/peers-venv/bin/python] [--infinity-python /work/infinity-venv/bin/python] [--quick]

Scenarios, in the order ``all`` runs them (12.4 minutes at load 2-6.5 on 2 cores, docs/benchmarks.md):

- ``embedding``: SciFact chunks through the MiniLM runner directly, ragserve's ingest pipeline, and the peers
  (sentence-transformers, FastEmbed, Infinity: each from its own venv, ``tests/bench/peers.py``);
- ``batching``: token-budgeted requests against fixed chunk counts on mixed lengths;
- ``query``: ``/v1/search`` p50/p95/p99 against its stages called directly, concurrency 1 and 32;
- ``rerank``: ``/v1/rerank`` against the reranker runner, 32 and 100 candidates, short and long documents;
- ``scaling``: indexing time and search latency at 1k, 10k and 100k chunks;
- ``gpu``: ``tests/bench/gpu.py`` (here ``--smoke`` unless a GPU is present).

Runners: ``--runner-urls`` (or ``RAGSERVE_TEST_RUNNER_URLS``) in the tests' form: the tiny Qwen3 embedding and
reranker runners (``max_model_len`` 2048) and the MiniLM embedding runner, already up. ``--quick`` shrinks every
scenario to seconds (the plumbing test, ``tests/bench/test_suite.py``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bench import results

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("embedding", "batching", "query", "rerank", "scaling", "gpu", "embedding-qwen3")
ALL = SCENARIOS[:-1]
"""``embedding-qwen3`` is left out of ``all``: the Qwen3-0.6B-shaped model runs at about 150 tokens/s on 2 CPU
cores, so its few SciFact documents take minutes per engine."""


@dataclass(frozen=True)
class Runners:
    embed: str
    rerank: str
    minilm: str
    max_model_len: int = 2048


def run_scenario(name: str, args: argparse.Namespace, runners: Runners, command: str) -> dict[str, Any]:
    quick = args.quick
    if name == "gpu":
        return run_gpu(args)
    if name in ("embedding", "embedding-qwen3"):
        from tests.bench import scenario_embedding as mod

        qwen3 = name == "embedding-qwen3"
        result = mod.measure(url=runners.minilm, docs=args.docs or (8 if quick else 24 if qwen3 else 160),
                             peers_python=args.peers_python, infinity_python=args.infinity_python,
                             model_name="qwen3-0.6b" if qwen3 else "minilm",
                             **({"batches": (16,), "inflights": (1,), "probe": 8, "peer_batches": (8,)}
                                if quick else {"batches": (8, 16), "inflights": (1, 2), "probe": 8,
                                               "peer_batches": (4, 8)} if qwen3 else {}))
    elif name == "batching":
        from tests.bench import scenario_batching as mod  # type: ignore[no-redef]

        result = mod.measure(url=runners.minilm, docs=8 if quick else 60, rounds=1 if quick else 2,
                             **({"counts_grid": (16,), "budgets": (2048,)} if quick else {}))
    elif name == "query":
        from tests.bench import scenario_query as mod  # type: ignore[no-redef]

        result = mod.measure(embed_url=runners.embed, rerank_url=runners.rerank, max_model_len=runners.max_model_len,
                             **({"points": 200, "n_seq": 5, "n_seq_rerank": 1, "concurrency": 4, "duration_s": 1.0,
                                 "concurrent_configs": [("dense", False), ("hybrid", False)]}
                                if quick else {"points": args.points,
                                               # with rerank, c=32 is the reranker's capacity (0.3 searches/s
                                               # on 2 cores) waiting out 30 s deadlines on both paths: 4 minutes
                                               # of the suite for a figure the c=1 rows and `rerank` already give
                                               "concurrent_configs": [("dense", False), ("hybrid", False)]}))
    elif name == "rerank":
        from tests.bench import scenario_rerank as mod  # type: ignore[no-redef]

        result = mod.measure(embed_url=runners.embed, rerank_url=runners.rerank, max_model_len=runners.max_model_len,
                             **({"requests": 1, "candidates": (4,), "window_candidates": 2} if quick else {}))
    elif name == "scaling":
        from tests.bench import scenario_scaling as mod  # type: ignore[no-redef]

        result = mod.measure(embed_url=runners.embed, rerank_url=runners.rerank, max_model_len=runners.max_model_len,
                             **({"sizes": (50, 200), "ingest_max": 50, "queries": 3} if quick else
                                {"sizes": tuple(args.sizes), "ingest_max": args.ingest_max}))
    else:
        raise SystemExit(f"unknown scenario {name!r}; one of {', '.join(SCENARIOS)}")
    print(mod.report(result), flush=True)
    results.save(args.out, name, result, mod.plot, command)
    return result


def run_gpu(args: argparse.Namespace) -> dict[str, Any]:
    """The GPU script as its own process (as it runs on a lent GPU), ``--smoke`` without a GPU."""
    try:
        import torch

        smoke = args.quick or not torch.cuda.is_available()
    except ImportError:
        smoke = True
    cmd = [sys.executable, str(Path(__file__).with_name("gpu.py")), "--out", str(args.out)]
    if smoke:
        cmd.append("--smoke")
    subprocess.run(cmd, check=True, cwd=ROOT)
    return {"scenario": "gpu", "smoke": smoke}


MODULES = {"embedding": "scenario_embedding", "embedding-qwen3": "scenario_embedding",
           "batching": "scenario_batching", "query": "scenario_query", "rerank": "scenario_rerank",
           "scaling": "scenario_scaling"}


def replot(out: Path, names: list[str]) -> None:
    import importlib
    import json

    for name in names:
        path = out / f"{name}.json"
        if name not in MODULES or not path.is_file():
            continue
        mod = importlib.import_module(f"tests.bench.{MODULES[name]}")
        result = json.loads(path.read_text())
        print(f"\n=== {name} ({result.get('command', '?')}, {result['environment']['utc']}) ===")
        print(mod.report(result))
        mod.plot(result, out / f"{name}.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", default=["all"],
                        help=f"all (default: {', '.join(ALL)}) or some of {', '.join(SCENARIOS)}")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench")
    parser.add_argument("--runner-urls", default=os.environ.get("RAGSERVE_TEST_RUNNER_URLS"),
                        help="EMBED,RERANK,MINILM: the tiny Qwen3 embedding and reranker runners, the MiniLM runner")
    parser.add_argument("--peers-python", default=None, help="Python of the venv with sentence-transformers and "
                        "fastembed (its own torch); unset: the peers are skipped")
    parser.add_argument("--infinity-python", default=None, help="Python of the venv with infinity-emb")
    parser.add_argument("--docs", type=int, default=None, help="embedding: SciFact documents (default 160)")
    parser.add_argument("--points", type=int, default=10_000, help="query: points in the collection")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1_000, 10_000, 100_000],
                        help="scaling: collection sizes, comma-separated")
    parser.add_argument("--ingest-max", type=int, default=1_000,
                        help="scaling: the largest size also indexed by an ingest job (the runner's pace)")
    parser.add_argument("--quick", action="store_true", help="every scenario in seconds (plumbing only)")
    parser.add_argument("--replot", action="store_true",
                        help="print the tables and redraw the plots from the JSON under --out; run nothing")
    args = parser.parse_args(argv)
    names = list(ALL) if args.scenarios == ["all"] else args.scenarios
    if args.replot:
        replot(args.out, names)
        return
    if not args.runner_urls:
        raise SystemExit("--runner-urls (or RAGSERVE_TEST_RUNNER_URLS) is needed: EMBED,RERANK,MINILM")
    embed, rerank, minilm = args.runner_urls.split(",")
    runners = Runners(embed, rerank, minilm)
    command = "python -m tests.bench " + shlex.join(argv if argv is not None else sys.argv[1:])
    started = time.perf_counter()
    elapsed, failed = {}, []
    for name in names:
        t = time.perf_counter()
        print(f"\n=== {name} ===", flush=True)
        try:
            run_scenario(name, args, runners, command)
        except Exception:  # one scenario that fails (a runner timing out) does not lose the others
            traceback.print_exc()
            failed.append(name)
        elapsed[name] = time.perf_counter() - t
        print(f"=== {name}: {elapsed[name]:.0f}s{' FAILED' if name in failed else ''} ===", flush=True)
    print("\n" + "; ".join(f"{k} {v:.0f}s" for k, v in elapsed.items())
          + f"; total {time.perf_counter() - started:.0f}s")
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
