"""Prometheus metrics of the embedded store's index and its background builds (:mod:`service.store.edge_background`),
read from the store when scraped, per collection:

- ``ragserve_index_points{collection, state}``: points whose dense vector is indexed, and those searched exactly;
- ``ragserve_index_build_running``, ``ragserve_index_build_failed``: 1 while a build runs, or since one was given up;
- ``ragserve_index_waiting_writes``: writes waiting for a running build's swap (``edge_build_max_unindexed``);
- ``ragserve_index_build_progress``, ``ragserve_index_build_eta_seconds``: a running build's estimates;
- ``ragserve_index_last_build_end_timestamp_seconds``, ``..._last_build_seconds``, ``..._last_build_points``: the
  last build swapped in.

The collection label is bounded: the first :data:`MAX_COLLECTIONS` collections by name have their own series, the
rest are summed under ``collection="_other"`` (points, running and failed builds). A Qdrant server has no such
status (it optimizes on its own): nothing is reported for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service.store.base import VectorStore
from service.store.errors import CollectionNotFound
from service.store.types import IndexStatus

MAX_COLLECTIONS = 32
OTHER = "_other"


@dataclass
class _Snapshot:
    each: dict[str, IndexStatus] = field(default_factory=dict)
    other: list[IndexStatus] = field(default_factory=list)


class IndexCollector(Collector):
    def __init__(self) -> None:
        self._snapshot = _Snapshot()

    async def refresh(self, store: VectorStore) -> None:
        """Read every collection's index status from ``store`` (call it before each scrape)."""
        snapshot = _Snapshot()
        names = sorted(c.name for c in await store.list_collections())
        for i, name in enumerate(names):
            try:
                status = (await store.get_collection(name)).index
            except CollectionNotFound:  # deleted meanwhile
                continue
            if status is None:
                return  # a backend without one: nothing to report
            if i < MAX_COLLECTIONS:
                snapshot.each[name] = status
            else:
                snapshot.other.append(status)
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot
        if not snap.each:
            return
        points = GaugeMetricFamily("ragserve_index_points", "Points by index state: indexed (HNSW or int8), or "
                                   "unindexed (searched exactly until the next build)", labels=["collection", "state"])
        running = GaugeMetricFamily("ragserve_index_build_running", "1 while a background build runs",
                                    labels=["collection"])
        failed = GaugeMetricFamily("ragserve_index_build_failed", "1 when the last build was given up",
                                   labels=["collection"])
        waiting = GaugeMetricFamily("ragserve_index_waiting_writes", "Writes waiting for a running build's swap "
                                    "(too many points unindexed)", labels=["collection"])
        progress = GaugeMetricFamily("ragserve_index_build_progress", "A running build's estimated fraction done",
                                     labels=["collection"])
        eta = GaugeMetricFamily("ragserve_index_build_eta_seconds", "A running build's estimated seconds left",
                                labels=["collection"])
        ended = GaugeMetricFamily("ragserve_index_last_build_end_timestamp_seconds", "When the last build swapped "
                                  "in ended (Unix time)", labels=["collection"])
        took = GaugeMetricFamily("ragserve_index_last_build_seconds", "How long the last build took",
                                 labels=["collection"])
        built = GaugeMetricFamily("ragserve_index_last_build_points", "How many points the last build indexed",
                                  labels=["collection"])
        groups = [(name, [s]) for name, s in snap.each.items()] + ([(OTHER, snap.other)] if snap.other else [])
        for name, statuses in groups:
            points.add_metric([name, "indexed"], sum(s.indexed for s in statuses))
            points.add_metric([name, "unindexed"], sum(s.unindexed for s in statuses))
            running.add_metric([name], sum(s.build == "running" for s in statuses))
            failed.add_metric([name], sum(s.build == "failed" for s in statuses))
            waiting.add_metric([name], sum(s.waiting_writes for s in statuses))
            if name == OTHER:
                continue
            (s,) = statuses
            if s.progress is not None:
                progress.add_metric([name], s.progress)
            if s.eta_s is not None:
                eta.add_metric([name], s.eta_s)
            if s.last_ended is not None:
                ended.add_metric([name], datetime.fromisoformat(s.last_ended).timestamp())
            if s.last_seconds is not None:
                took.add_metric([name], s.last_seconds)
            if s.last_points is not None:
                built.add_metric([name], s.last_points)
        yield from (points, running, failed, waiting, progress, eta, ended, took, built)
