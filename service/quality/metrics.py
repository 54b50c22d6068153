"""The retrieval-quality series of /metrics, per collection:

- ``ragserve_searches_total{collection, mode}``: searches (a /v1/context over three collections is three);
- ``ragserve_search_zero_hits_total{collection, restricted}``: searches that found nothing, ``restricted="true"``
  where a filter or the key's tenant narrowed them (a filter or tenant that matches nothing);
- ``ragserve_search_top_score{collection, mode}``: a histogram of the engine's top score (before any rerank),
  with buckets per mode, since cosine, BM25 and fused scores live on different scales;
- ``ragserve_search_top_rerank_score{collection}``: a histogram of the reranker's top score;
- ``ragserve_search_reranked_total``, ``ragserve_search_rerank_top_changed_total{collection}``: reranked searches,
  and those whose top hit the reranker changed;
- ``ragserve_search_low_score_total{collection, mode}``: top score under its floor
  (``RAGSERVE_QUALITY__LOW_SCORE_FLOORS``; ``mode="rerank"`` for the reranker's);
- ``ragserve_feedback_total{collection, rating}``: feedback by rating (stored or not);
- ``ragserve_query_log_dropped_total{reason}``: records the log could not write (``full``: the buffer was;
  ``error``: the database failed or timed out).

Collection labels are bounded: counts are kept per collection, and each scrape gives the busiest
``max_collection_labels`` (by searches) their own label and sums the rest under ``collection="_other"``. A
collection that leaves the top N moves its counts to ``_other``, so that series can step up at a scrape; a
``rate()`` over a window with such a step overstates it once.

**Several API processes** (``--workers N``) share one port, so a scrape reaches one of them at random. Each
process then publishes its counts to a file of its own in a shared folder (:meth:`QualityCollector.share`, every
``flush_interval_s``), and whichever process answers a scrape adds every file's counts to its own live ones before
ranking the collections: the series are the sum over the processes, as Prometheus' multiprocess mode sums its
counters, and a process that exits leaves its last counts in (a counter never goes down while ``serve`` runs; the
folder is emptied when it starts). prometheus_client's own multiprocess mode cannot serve here: it keeps each
series' labels as written, and the top-N rule relabels at each scrape.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from service.quality.outcome import SearchOutcome

OTHER = "_other"  # as the index series have it (service/observability/index_metrics.py)
MODES = ("dense", "sparse", "hybrid")
RATINGS = (-1, 0, 1, 2, 3)

# Cosine and the reranker's probability. No negative bound: Prometheus' histograms with one have no _sum or _count
# (prometheus_client leaves them out), and a top cosine under 0 is counted in le="0".
_UNIT = tuple(round(i * 0.05, 2) for i in range(21))
BUCKETS: dict[str, tuple[float, ...]] = {
    "dense": _UNIT,
    "rerank": _UNIT,
    "sparse": (0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100),
    "hybrid": (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 2.0),
}
"""Upper bounds per score kind. Hybrid covers RRF at the default k=2 and weights 1 + 1.5 (the demo's top hit fuses
to 1.1) and DBSF (at most the sum of the weights); anything above 2 is counted in +Inf."""


@dataclass
class ScoreHistogram:
    """Counts per bucket (not cumulative; the last is above every bound) and the sum of the scores."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        i = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[i] += 1
        self.total += value

    def add(self, other: ScoreHistogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total

    def state(self) -> dict[str, Any]:
        return {"counts": self.counts, "total": self.total}

    @classmethod
    def from_state(cls, kind: str, state: dict[str, Any]) -> ScoreHistogram:
        h = cls(BUCKETS[kind])
        h.counts, h.total = list(state["counts"]), float(state["total"])
        return h

    def cumulative(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, n in zip([*map(str, self.bounds), "+Inf"], self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


@dataclass
class _Collection:
    searches: Counter[str] = field(default_factory=Counter)
    zero: Counter[bool] = field(default_factory=Counter)
    top: dict[str, ScoreHistogram] = field(default_factory=dict)
    reranked: int = 0
    changed: int = 0
    low: Counter[str] = field(default_factory=Counter)
    feedback: Counter[int] = field(default_factory=Counter)

    def histogram(self, kind: str) -> ScoreHistogram:
        found = self.top.get(kind)
        if found is None:
            found = self.top[kind] = ScoreHistogram(BUCKETS[kind])
        return found

    def state(self) -> dict[str, Any]:
        return {"searches": dict(self.searches), "zero": {str(k).lower(): v for k, v in self.zero.items()},
                "top": {k: h.state() for k, h in self.top.items()}, "reranked": self.reranked,
                "changed": self.changed, "low": dict(self.low),
                "feedback": {str(k): v for k, v in self.feedback.items()}}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _Collection:
        return cls(Counter(state["searches"]), Counter({k == "true": v for k, v in state["zero"].items()}),
                   {k: ScoreHistogram.from_state(k, h) for k, h in state["top"].items()}, state["reranked"],
                   state["changed"], Counter(state["low"]), Counter({int(k): v for k, v in state["feedback"].items()}))

    def add(self, other: _Collection) -> None:
        self.searches.update(other.searches)
        self.zero.update(other.zero)
        for kind, h in other.top.items():
            self.histogram(kind).add(h)
        self.reranked += other.reranked
        self.changed += other.changed
        self.low.update(other.low)
        self.feedback.update(other.feedback)


class QualityCollector(Collector):
    def __init__(self, *, max_collection_labels: int = 50, low_score_floors: Mapping[str, float] | None = None) -> None:
        self.max_labels = max_collection_labels
        self.floors = dict(low_score_floors if low_score_floors is not None else {"dense": 0.3, "rerank": 0.1})
        self._collections: dict[str, _Collection] = {}
        self._dropped: Counter[str] = Counter()
        self._lock = threading.Lock()  # a scrape may run in another thread than the loop that observes
        self._shared: Path | None = None
        self._own: Path | None = None
        self._published = -1
        self._changes = 0

    def share(self, folder: Path) -> None:
        """Sum this process's counts with those the other API processes publish in ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        self._shared = folder
        self._own = folder / f"{os.getpid()}-{secrets.token_hex(4)}.json"

    def publish(self) -> None:
        """Write this process's counts to its file in the shared folder (when they changed since the last time)."""
        if self._own is None or self._published == self._changes:
            return
        with self._lock:
            changes = self._changes
            state = {"collections": {n: c.state() for n, c in self._collections.items()},
                     "dropped": dict(self._dropped)}
        partial = self._own.with_suffix(".partial")
        partial.write_text(json.dumps(state, separators=(",", ":")))
        partial.replace(self._own)  # a reader sees the old file or the new, never half of one
        self._published = changes

    def _peers(self) -> list[dict[str, Any]]:
        if self._shared is None:
            return []
        states = []
        for path in sorted(self._shared.glob("*.json")):
            if path == self._own:
                continue
            try:
                states.append(json.loads(path.read_text()))
            except (OSError, ValueError):  # removed meanwhile
                continue
        return states

    def _of(self, collection: str) -> _Collection:
        found = self._collections.get(collection)
        if found is None:
            found = self._collections[collection] = _Collection()
        return found

    def observe_search(self, o: SearchOutcome) -> None:
        with self._lock:
            self._changes += 1
            c = self._of(o.collection)
            c.searches[o.mode] += 1
            if o.hits == 0:
                c.zero[o.restricted] += 1
            if o.top_score is not None and math.isfinite(o.top_score):
                c.histogram(o.mode).observe(o.top_score)
                self._floor(c, o.mode, o.top_score)
            if o.reranked:
                c.reranked += 1
                c.changed += bool(o.rerank_changed)
                if o.rerank_top_score is not None and math.isfinite(o.rerank_top_score):
                    c.histogram("rerank").observe(o.rerank_top_score)
                    self._floor(c, "rerank", o.rerank_top_score)

    def _floor(self, c: _Collection, kind: str, score: float) -> None:
        floor = self.floors.get(kind)
        if floor is not None and score < floor:
            c.low[kind] += 1

    def observe_feedback(self, collection: str, rating: int) -> None:
        with self._lock:
            self._changes += 1
            self._of(collection).feedback[rating] += 1

    def dropped(self, reason: str, n: int) -> None:
        with self._lock:
            self._changes += 1
            self._dropped[reason] += n

    def totals(self) -> tuple[dict[str, _Collection], Counter[str]]:
        """Every collection's counts and the drops, this process's and its peers' added up."""
        peers = self._peers()
        with self._lock:
            collections = {n: _Collection.from_state(c.state()) for n, c in self._collections.items()}
            dropped = Counter(self._dropped)
        for peer in peers:
            for name, state in peer["collections"].items():
                collections.setdefault(name, _Collection()).add(_Collection.from_state(state))
            dropped.update(peer["dropped"])
        return collections, dropped

    def labelled(self) -> dict[str, _Collection]:
        """Each labelled collection's counts: the busiest ``max_labels`` by name, the rest merged as ``_other``."""
        return self._labelled(self.totals()[0])

    def _labelled(self, collections: dict[str, _Collection]) -> dict[str, _Collection]:
        ranked = sorted(collections.items(), key=lambda kv: (-sum(kv[1].searches.values()), kv[0]))
        out: dict[str, _Collection] = {}
        for i, (name, counts) in enumerate(ranked):
            label = name if i < self.max_labels else OTHER
            merged = out.get(label)
            if merged is None:
                merged = out[label] = _Collection()
            merged.add(counts)
        return out

    def collect(self) -> Iterator[Metric]:
        collections, drops = self.totals()
        labelled = self._labelled(collections)
        searches = CounterMetricFamily("ragserve_searches", "Searches, per collection searched",
                                       labels=["collection", "mode"])
        zero = CounterMetricFamily("ragserve_search_zero_hits", "Searches that returned no hit; restricted: a "
                                   "filter or the key's tenant narrowed the search",
                                   labels=["collection", "restricted"])
        top = HistogramMetricFamily("ragserve_search_top_score", "The engine's top score per search (before any "
                                    "rerank)", labels=["collection", "mode"])
        rerank_top = HistogramMetricFamily("ragserve_search_top_rerank_score", "The reranker's top score per "
                                           "reranked search", labels=["collection"])
        reranked = CounterMetricFamily("ragserve_search_reranked", "Reranked searches", labels=["collection"])
        changed = CounterMetricFamily("ragserve_search_rerank_top_changed", "Reranked searches whose top hit the "
                                      "reranker changed", labels=["collection"])
        low = CounterMetricFamily("ragserve_search_low_score", "Searches whose top score fell under its floor "
                                  "(RAGSERVE_QUALITY__LOW_SCORE_FLOORS)", labels=["collection", "mode"])
        feedback = CounterMetricFamily("ragserve_feedback", "Feedback given, by rating (stored in the query log "
                                       "or not)", labels=["collection", "rating"])
        dropped = CounterMetricFamily("ragserve_query_log_dropped", "Search records and log rows not written: the "
                                      "buffer was full, or the database failed or was too slow", labels=["reason"])
        for name, c in labelled.items():
            for mode in MODES:
                if c.searches[mode]:
                    searches.add_metric([name, mode], c.searches[mode])
            for restricted in (False, True):
                zero.add_metric([name, str(restricted).lower()], c.zero[restricted])
            for kind, h in sorted(c.top.items()):
                target = rerank_top if kind == "rerank" else top
                target.add_metric([name] if kind == "rerank" else [name, kind], h.cumulative(), h.total)
            reranked.add_metric([name], c.reranked)
            changed.add_metric([name], c.changed)
            for kind in sorted(self.floors):
                low.add_metric([name, kind], c.low[kind])
            for rating in RATINGS:
                if c.feedback[rating]:
                    feedback.add_metric([name, str(rating)], c.feedback[rating])
        for reason in ("full", "error"):
            dropped.add_metric([reason], drops[reason])
        yield from (searches, zero, top, rerank_top, reranked, changed, low, feedback, dropped)
