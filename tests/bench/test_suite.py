"""The benchmark suite's plumbing (``python -m tests.bench --quick``) against the session's real runners: every
scenario runs at a toy size and leaves its JSON and its plot; the figures themselves are not asserted (they are
benchmarks, not timed tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bench.__main__ import main
from tests.support.runners import RunnerURLs

ROOT = Path(__file__).resolve().parents[2]


def urls(runners: RunnerURLs) -> str:
    return f"{runners.qwen3_embed},{runners.qwen3_rerank},{runners.minilm_embed}"


@pytest.mark.soak  # a benchmark run at toy size: minutes of CI for plumbing; the soak command runs it
@pytest.mark.timeout(600)
@pytest.mark.parametrize("scenario", ["embedding", "batching", "query", "rerank", "scaling"])
def test_scenario_writes_its_table_json_and_plot(scenario: str, runners: RunnerURLs, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    main([scenario, "--quick", "--out", str(tmp_path), "--runner-urls", urls(runners)])
    result = json.loads((tmp_path / f"{scenario}.json").read_text())
    assert result["scenario"] == scenario
    assert result["rows"], result
    if scenario == "rerank":  # documents past the reranker's window are cut by ragserve, not refused (422)
        assert [r["docs"] for r in result["rows"]] == ["short", "long", "over window"]
        assert all(r["errors"] == 0 for r in result["rows"]), result["rows"]
    assert result["environment"]["cpus"] >= 1 and result["command"].startswith("python -m tests.bench")
    assert (tmp_path / f"{scenario}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"=== {scenario}:" in capsys.readouterr().out


def test_a_peer_that_cannot_run_is_an_error_in_its_result(tmp_path: Path) -> None:
    """The peers' script under a Python without the engine (this venv has no infinity_emb): an ``error`` with
    the reason, so the scenario keeps the other engines' figures."""
    from tests.bench.scenario_embedding import run_peer

    result = run_peer(sys.executable, {"engine": "infinity", "model": str(tmp_path), "texts": ["a"], "tokens": 1,
                                       "batches": [1], "probe": 1})
    assert result["engine"] == "infinity" and "infinity_emb" in result["error"], result


@pytest.mark.timeout(300)
def test_gpu_script_smoke_runs_on_the_cpu(tmp_path: Path) -> None:
    """The GPU script's --smoke path: a tiny Qwen3-shaped model, both passes, MFU arithmetic, JSON and plot."""
    proc = subprocess.run([sys.executable, "tests/bench/gpu.py", "--smoke", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "gpu.json").read_text())
    assert result["smoke"] is True
    assert {r["task"] for r in result["rows"]} == {"embed", "rerank"}
    for r in result["rows"]:
        assert r["tokens_per_s"] > 0 and 0 <= r["padding_share"] < 1 and r["mfu"] >= 0
        assert r["flops_per_token"] > 0
    assert (tmp_path / "gpu.png").is_file()


def test_token_budget_packing_matches_the_indexer() -> None:
    """The batching scenario packs as ``Pipeline._embed`` does: whole chunks until the next would pass the budget."""
    from tests.bench.scenario_batching import by_count, by_tokens

    counts = [100, 100, 50, 300, 10, 10]
    assert by_tokens(counts, 250) == [range(0, 3), range(3, 4), range(4, 6)]
    assert by_count(counts, 4) == [range(0, 4), range(4, 6)]


@pytest.mark.soak  # compares CPU times: a figure
async def test_overhead_bench_times_every_layer_and_the_api_costs_more_than_the_service(
    soak_figures: Callable[..., None],
) -> None:
    """``bench_overhead`` runs (short), reports each layer in both processes, and a search through the app costs
    more CPU than the search service it wraps, which costs more than the API layer with its parts stubbed (if
    not, the app path is not what it times); the store process did work for every store call."""
    from tests.bench import bench_overhead

    result = await bench_overhead.measure(n=20)
    own = bench_overhead.own_cpu_ms(result)
    for figure, value in (("overhead.api_search_cpu_ms", result[bench_overhead.SEARCH]["cpu_ms"]),
                          ("overhead.service_search_cpu_ms", result["SearchService.search (dense)"]["cpu_ms"]),
                          ("overhead.own_cpu_ms", own["total"])):
        soak_figures(figure, value, "ms CPU", "lower", tolerance=0.5, slack=0.2)
    assert list(result) == ["httpx post + json (mock)", "EmbeddingClient.embed_query", bench_overhead.ENGINE,
                            "EdgeStore.query (in-process)", "ProcessStore round trip (ping)", "ProcessStore.query",
                            "SearchService.search (dense)", "GET /health (ASGI)", bench_overhead.SEARCH,
                            bench_overhead.SEARCH_C32, "POST /v1/search via httpx ASGITransport", "POST /v1/search, embed stubbed",
                            "POST /v1/search, store stubbed", bench_overhead.API_ALONE]
    search = result[bench_overhead.SEARCH]
    assert search["cpu_ms"] > result["SearchService.search (dense)"]["cpu_ms"]
    assert search["cpu_ms"] > result[bench_overhead.API_ALONE]["cpu_ms"]
    assert search["store_cpu_ms"] > 0 and result["ProcessStore.query"]["store_cpu_ms"] > 0
    assert "ragserve's own CPU per dense search" in bench_overhead.report(result)


def test_query_cache_bench_runs_its_stream_both_ways_on_the_scripted_runner(tmp_path: Path) -> None:
    """``bench_query_cache --scripted`` (plumbing, no vLLM): the same stream with the cache off and on; with a
    bound that holds every query, exactly the stream's repeats hit, and with the cache off nothing does."""
    from tests.bench import bench_query_cache

    out = tmp_path / "query-cache.json"
    bench_query_cache.main(["--scripted", "--searches", "40", "--docs", "10", "--rounds", "1", "--warmup", "1",
                            "--json", str(out)])
    result = json.loads(out.read_text())
    _, repeats = bench_query_cache.query_stream(40, 0.3, 20)
    off, on = result["configs"]
    assert (off["cache"], on["cache"]) == ("off", "on")
    assert (off["searches"], on["searches"]) == (40, 40)
    assert off["hit_rate"] == 0.0 and off["repeat_ms"]["n"] == sum(repeats)
    assert on["hit_rate"] == sum(repeats) / 40 == result["stream_repeats"]
    assert (on["hit_ms"]["n"], on["miss_ms"]["n"]) == (sum(repeats), 40 - sum(repeats))


def test_store_threads_bench_measures_each_pool_size_with_the_same_answer() -> None:
    """``bench_store_threads`` loads a shard with each pool size; the nearest point to a stored vector is that
    point, whichever pool searched."""
    from tests.bench import bench_store_threads

    rows = bench_store_threads.measure(300, 8, 20)
    assert [(r["pool"], r["first"]) for r in rows] == [("engine default", 7), (1, 7), (2, 7)]


async def test_background_build_bench_measures_a_build_to_its_swap(tmp_path: Path) -> None:
    """``bench_background_build`` runs its loop until the build swapped in, and reports each phase's stall."""
    from tests.bench import bench_background_build

    row = await bench_background_build.measure(1200, 8, build=True, seconds=120, root=tmp_path / "qdrant")
    assert row["last_built"] == "hnsw" and row["indexed"] >= 1200 and row["searches"] >= 1
    assert {"copying", "building"} <= set(row["max_stall_ms"]) or "started" in row["max_stall_ms"]
