"""The quality series: what each search and rating adds, and a collection label set that stays bounded (the
busiest N by searches, the rest under ``_other``)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.quality.metrics import QualityCollector
from service.quality.outcome import SearchOutcome


def samples(collector: QualityCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}


def test_each_outcome_moves_its_series() -> None:
    c = QualityCollector(low_score_floors={"dense": 0.3, "rerank": 0.1})
    c.observe_search(SearchOutcome("docs", "dense", restricted=True, hits=0, top_score=None))
    c.observe_search(SearchOutcome("docs", "dense", restricted=False, hits=3, top_score=0.22))
    c.observe_search(SearchOutcome("docs", "hybrid", restricted=False, hits=3, top_score=0.5, reranked=True,
                                   rerank_top_score=0.05, rerank_changed=True))
    c.observe_feedback("docs", -1)
    c.dropped("full", 2)
    got = samples(c)
    docs = (("collection", "docs"),)
    assert got[("ragserve_searches_total", (("collection", "docs"), ("mode", "dense")))] == 2
    assert got[("ragserve_searches_total", (("collection", "docs"), ("mode", "hybrid")))] == 1
    assert got[("ragserve_search_zero_hits_total", (("collection", "docs"), ("restricted", "true")))] == 1
    assert got[("ragserve_search_zero_hits_total", (("collection", "docs"), ("restricted", "false")))] == 0
    assert got[("ragserve_search_top_score_bucket", (("collection", "docs"), ("le", "0.2"), ("mode", "dense")))] == 0
    assert got[("ragserve_search_top_score_bucket", (("collection", "docs"), ("le", "0.25"), ("mode", "dense")))] == 1
    assert got[("ragserve_search_top_score_sum", (("collection", "docs"), ("mode", "dense")))] == 0.22
    assert got[("ragserve_search_top_rerank_score_count", docs)] == 1
    assert got[("ragserve_search_reranked_total", docs)] == 1
    assert got[("ragserve_search_rerank_top_changed_total", docs)] == 1
    assert got[("ragserve_search_low_score_total", (("collection", "docs"), ("mode", "dense")))] == 1
    assert got[("ragserve_search_low_score_total", (("collection", "docs"), ("mode", "rerank")))] == 1
    assert got[("ragserve_feedback_total", (("collection", "docs"), ("rating", "-1")))] == 1
    assert got[("ragserve_query_log_dropped_total", (("reason", "full"),))] == 2


def test_a_thousand_collections_keep_n_labels() -> None:
    c = QualityCollector(max_collection_labels=50)
    for i in range(1000):
        for _ in range(1 + (i % 7 == 0) * 5):  # every seventh collection is busier
            c.observe_search(SearchOutcome(f"c{i:04d}", "dense", restricted=False, hits=1, top_score=0.5))
        c.observe_feedback(f"c{i:04d}", 1)
    got = samples(c)
    labels = {dict(k[1]).get("collection") for k in got} - {None}
    busiest = {f"c{i:04d}" for i in range(0, 1000, 7)}  # 143 of them, six searches each
    assert len(labels) == 51 and "_other" in labels
    assert labels - {"_other"} == set(sorted(busiest)[:50])  # ties broken by name
    total = sum(v for (name, _), v in got.items() if name == "ragserve_searches_total")
    assert total == 1000 + 143 * 5  # nothing lost in the merge
    assert got[("ragserve_feedback_total", (("collection", "_other"), ("rating", "1")))] == 950


def test_processes_sharing_a_folder_each_scrape_the_sum(tmp_path: Path) -> None:
    """``serve --workers 2``: a scrape reaches either process; both answer the two processes' sum, with the top-N
    rule applied to the sum."""
    first, second = QualityCollector(max_collection_labels=1), QualityCollector(max_collection_labels=1)
    first.share(tmp_path)
    second.share(tmp_path)
    for _ in range(3):
        first.observe_search(SearchOutcome("small", "dense", restricted=False, hits=1, top_score=0.5))
    for _ in range(2):
        second.observe_search(SearchOutcome("big", "dense", restricted=False, hits=0, top_score=None))
    second.observe_search(SearchOutcome("big", "dense", restricted=True, hits=0, top_score=None))
    second.observe_search(SearchOutcome("small", "dense", restricted=False, hits=1, top_score=0.7))
    second.dropped("error", 5)
    for c in (first, second):
        c.publish()
    first.observe_feedback("big", 2)  # after its last publish: its own scrape counts it, the other's not yet
    mine, theirs = samples(first), samples(second)
    for got, feedback in ((mine, 1), (theirs, 0)):
        assert got[("ragserve_searches_total", (("collection", "small"), ("mode", "dense")))] == 4  # 3 + 1
        assert got[("ragserve_searches_total", (("collection", "_other"), ("mode", "dense")))] == 3  # big: 3 < 4
        assert got[("ragserve_search_zero_hits_total", (("collection", "_other"), ("restricted", "false")))] == 2
        assert got[("ragserve_search_top_score_sum", (("collection", "small"), ("mode", "dense")))] == 0.5 * 3 + 0.7
        assert got[("ragserve_query_log_dropped_total", (("reason", "error"),))] == 5
        assert got.get(("ragserve_feedback_total", (("collection", "_other"), ("rating", "2"))), 0) == feedback
