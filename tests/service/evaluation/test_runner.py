"""``ragserve eval`` through the client against the live service, on a BEIR-layout dataset small enough
that every score is known: each query's one relevant document is the only one sharing its words."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from service.config import Settings
from tests.support.app import API_KEY
from tests.support.server import live_server


def _dataset(root: Path) -> Path:
    corpus = [{"_id": "d1", "title": "Espresso", "text": "Espresso forces hot water through ground coffee."},
              {"_id": "d2", "title": "Tea", "text": "Green tea is steeped at eighty degrees."},
              {"_id": "d3", "title": "Bread", "text": "Sourdough rises with a wild yeast starter."}]
    queries = [{"_id": "q1", "text": "espresso coffee water"}, {"_id": "q2", "text": "sourdough yeast starter"}]
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n")
    return root


def test_eval_indexes_then_scores_every_mode(minilm_settings: Settings, tmp_path: Path) -> None:
    data = _dataset(tmp_path / "tiny")
    with live_server(minilm_settings) as url:
        run = subprocess.run([sys.executable, "-m", "service.cli", "eval", str(data), "--collection", "tiny",
                              "--url", url, "--mode", "sparse", "--mode", "hybrid:dbsf", "--json"],
                             env={**os.environ, "RAGSERVE_API_KEY": API_KEY}, text=True, capture_output=True,
                             timeout=300)
        missing = subprocess.run([sys.executable, "-m", "service.cli", "eval", str(data), "--collection", "bad name",
                                  "--url", url], env={**os.environ, "RAGSERVE_API_KEY": API_KEY}, text=True,
                                 capture_output=True, timeout=300)
    assert run.returncode == 0, run.stderr
    reports = json.loads(run.stdout)
    assert [r["mode"] for r in reports] == ["sparse", "hybrid:dbsf"]
    for r in reports:
        assert r["queries"] == 2
        assert r["metrics"]["ndcg@10"] == 1.0 and r["metrics"]["mrr@10"] == 1.0
    assert missing.returncode == 1  # the path's own pattern refused it, in the envelope, as the CLI prints it
    assert missing.stderr == ("ragserve: error 422 validation_error: path.name: String should match pattern "
                              r"'^[A-Za-z0-9][A-Za-z0-9_\-]{0,63}$' (param path.name)" "\n")
