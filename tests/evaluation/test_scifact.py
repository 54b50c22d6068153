"""SciFact through the running service with the minilm profile: index the corpus through
``POST /v1/collections/{name}/documents``, run the 300 test queries through ``POST /v1/search`` (no
reranking), and reproduce the brute-force reference nDCG@10 = 0.6451 within 0.005.

Takes ~6 minutes on 2 cores (embedding 5,183 abstracts); marked ``slow``, run in CI.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from service.config import Settings
from service.evaluation.dataset import BeirDataset
from service.evaluation.runner import evaluate_service
from tests.support.app import API_KEY
from tests.support.server import live_server

SCIFACT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "scifact"
REFERENCE_NDCG10 = 0.6451


@pytest.mark.slow
async def test_scifact_dense_reproduces_the_reference(minilm_settings: Settings) -> None:
    assert (SCIFACT / "corpus.jsonl").exists(), f"SciFact not found at {SCIFACT}"
    with live_server(minilm_settings) as url:
        (report,) = await evaluate_service(url, API_KEY, BeirDataset(SCIFACT), "scifact", progress=False)
    print(f"\nSciFact test, minilm, dense: {report.metrics} latency {report.latency_ms}")
    assert report.queries == 300
    assert report.metrics["ndcg@10"] == pytest.approx(REFERENCE_NDCG10, abs=0.005)
    assert report.metrics["recall@100"] == pytest.approx(0.925, abs=0.01)


@pytest.mark.slow
async def test_scifact_through_ragserve_index_reproduces_the_reference(minilm_settings: Settings) -> None:
    """The indexer's path: ``ragserve index corpus.jsonl`` (upload, job, worker), then the 300 queries."""
    import os
    import subprocess
    import sys

    minilm_settings.indexer.poll_s = 0.05
    with live_server(minilm_settings, with_worker=True) as url:
        env = {**os.environ, "RAGSERVE_API_KEYS": API_KEY}
        indexed = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "service.cli", "index", str(SCIFACT / "corpus.jsonl"), "--collection", "scifact",
             "--url", url, "--quiet"],
            env=env, text=True, capture_output=True, timeout=1800,
        )
        assert indexed.returncode == 0, indexed.stdout + indexed.stderr
        assert "5183 seen, 5183 indexed" in indexed.stdout
        (report,) = await evaluate_service(url, API_KEY, BeirDataset(SCIFACT), "scifact", progress=False)
    print(f"\nSciFact test via ragserve index, minilm, dense: {report.metrics}")
    assert report.metrics["ndcg@10"] == pytest.approx(REFERENCE_NDCG10, abs=0.005)
