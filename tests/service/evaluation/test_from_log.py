"""The loop closes, on a small scale: SciFact queries searched through the running minilm stack with the query log
on, feedback from SciFact's qrels (a relevant hit +1, a non-relevant top hit -1), then ``ragserve eval --from-log
--a mode=dense --b mode=hybrid`` as a user runs it. The judged set it builds is the script's judgments, row for
row, and its judged-only nDCG@10 per query and per side is pytrec_eval's (``judged_docs_only_flag``) on the same
judgments and runs; its full-qrels figure is ``ragserve eval``'s measure on the same runs."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from service.config import Settings
from service.evaluation.dataset import BeirDataset
from service.evaluation.from_log import as_run, judged_ndcg, parse_config
from service.evaluation.metrics import evaluate
from tests.support.app import API_KEY
from tests.support.cli import ragserve
from tests.support.server import live_server

SCIFACT = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "scifact"
QUERIES = 10
DISTRACTORS = 80


def small_scifact(out: Path) -> BeirDataset:
    """The first QUERIES test queries, their relevant abstracts and the first DISTRACTORS others, as a BEIR folder."""
    full = BeirDataset(SCIFACT)
    qrels = dict(sorted(full.qrels("test").items(), key=lambda kv: int(kv[0]))[:QUERIES])
    texts = full.queries("test")
    relevant = {d for docs in qrels.values() for d in docs}
    corpus = [d for i, d in enumerate(full.corpus()) if d["id"] in relevant or i < DISTRACTORS]
    (out / "qrels").mkdir(parents=True)
    with open(out / "corpus.jsonl", "w") as f:
        for d in corpus:
            f.write(json.dumps({"_id": d["id"], "title": "", "text": d["text"]}) + "\n")
    with open(out / "queries.jsonl", "w") as f:
        for q in qrels:
            f.write(json.dumps({"_id": q, "text": texts[q]}) + "\n")
    with open(out / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, docs in qrels.items():
            for d, grade in docs.items():
                f.write(f"{q}\t{d}\t{grade}\n")
    return BeirDataset(out)


def test_rated_searches_become_a_judged_set_and_an_ab_report(minilm_settings: Settings, tmp_path: Path) -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    dataset = small_scifact(tmp_path / "scifact")
    qrels, queries = dataset.qrels("test"), dataset.queries("test")
    minilm_settings.query_log.enabled = True
    given: set[tuple[str, str, str, int]] = set()
    with live_server(minilm_settings) as url, httpx.Client(base_url=url, timeout=300,
                                                           headers={"Authorization": f"Bearer {API_KEY}"}) as http:
        assert http.post("/v1/collections", json={"name": "scifact"}).status_code == 201
        docs = [{"id": d["id"], "text": d["text"]} for d in dataset.corpus()]
        r = http.post("/v1/collections/scifact/documents", json={"documents": docs})
        assert r.status_code == 200, r.text
        for qid, text in queries.items():
            r = http.post("/v1/search", json={"collection": "scifact", "query": text, "top_k": 10, "mode": "dense"})
            assert r.status_code == 200, r.text
            body = r.json()
            ranked = list(dict.fromkeys(h["doc_id"] for h in body["hits"]))
            ratings = {d: 1 for d in ranked if d in qrels[qid]}
            if ranked and ranked[0] not in qrels[qid]:
                ratings[ranked[0]] = -1
            for doc, rating in ratings.items():
                f = http.post("/v1/feedback", json={"search_id": body["search_id"], "doc_id": doc, "rating": rating})
                assert f.status_code == 200 and f.json()["stored"] is True, f.text
                given.add((text, "scifact", doc, rating))
        done = ragserve("eval", str(dataset.root), "--from-log", "--a", "mode=dense", "--b", "mode=hybrid",
                        "--out", str(tmp_path / "report"), url=url)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert "| A | mode=dense |" in (tmp_path / "report.md").read_text()

    built = {(j["query"], j["collection"], j["doc_id"], j["rating"]) for j in report["judgments"]}
    assert len(report["judgments"]) == len(built)  # no row twice
    assert built == given
    assert any(r == -1 for *_, r in given) and any(r == 1 for *_, r in given)  # both kinds of judgment occur

    qids = {j["query_id"] for j in report["judgments"]}
    judged = {q: {j["doc_id"]: max(j["rating"], 0) for j in report["judgments"] if j["query_id"] == q} for q in qids}
    text_of = {j["query_id"]: j["query"] for j in report["judgments"]}
    beir_id = {text: q for q, text in queries.items()}
    for side in ("a", "b"):
        rankings = report[side]["rankings"]
        assert set(rankings) == qids
        reference = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut.10"}, judged_docs_only_flag=True)
        expected = {q: v["ndcg_cut_10"] for q, v in reference.evaluate(as_run(rankings)).items()}
        scored = report[side]["per_query"]
        assert set(scored) == {q for q in qids if any(judged[q].values())}
        for q, value in scored.items():
            assert value == pytest.approx(expected[q], abs=1e-6), (side, q)
            assert value == pytest.approx(judged_ndcg(rankings[q], judged[q]), abs=1e-12)
        assert report[side]["ndcg"] == pytest.approx(sum(expected[q] for q in scored) / len(scored), abs=1e-6)
        full = evaluate(qrels, as_run({beir_id[text_of[q]]: rankings[q] for q in qids}))["ndcg@10"]
        assert report[side]["full_qrels_ndcg"] == pytest.approx(full, abs=1e-9)
    assert report["a"]["config"] == parse_config("mode=dense") and report["b"]["config"] == {"mode": "hybrid"}
    wins, losses = set(report["wins"]), set(report["losses"])
    a, b = report["a"]["per_query"], report["b"]["per_query"]
    assert wins == {q for q in a if b[q] > a[q] + 1e-12} and losses == {q for q in a if b[q] < a[q] - 1e-12}
