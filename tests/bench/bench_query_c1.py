"""The c=1 rows of the query scenario alone (dense and hybrid, no rerank): ``/v1/search`` against its stages
called directly, one line per config with the overhead in ms and in percent. For before/after figures, run it
from a worktree of each commit in turn (``ragserve serve`` starts from the tree the script is in), alternating:

    git worktree add /tmp/old <commit> && for i in 1 2 3 4; do for t in /tmp/old .; do
        (cd $t && python -m tests.bench.bench_query_c1 --embed-url E --rerank-url R); done; done
"""

from __future__ import annotations

import argparse

from tests.bench import scenario_query


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embed-url", required=True)
    parser.add_argument("--rerank-url", required=True)
    parser.add_argument("--queries", type=int, default=60, help="queries each way per config")
    parser.add_argument("--points", type=int, default=10_000)
    args = parser.parse_args(argv)
    result = scenario_query.measure(embed_url=args.embed_url, rerank_url=args.rerank_url, points=args.points,
                                    n_seq=args.queries, configs=[("dense", False), ("hybrid", False)],
                                    concurrent_configs=[])
    for r in result["rows"]:
        print(f"{r['config']:7s} API p50 {r['api_p50']:7.2f} ms  stages p50 {r['direct_p50']:7.2f} ms  overhead "
              f"{r['api_p50'] - r['direct_p50']:+6.2f} ms {r['overhead_p50']:+.1%}  (embed {r['stage_embed']:.1f}, "
              f"search {r['stage_search']:.1f})")


if __name__ == "__main__":
    main()
