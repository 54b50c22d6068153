"""Prometheus metrics: request counts and latency per route, latency per pipeline stage, upstream errors, per
runner replica (:mod:`service.observability.replica_metrics`), of the query-embedding cache
(:mod:`service.search.query_cache_metrics`), of the embedded store's index
(:mod:`service.observability.index_metrics`) and of retrieval quality (:mod:`service.quality.metrics`).

One registry per app, so several apps (tests) never collide on global collectors.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.config.quality import QualitySettings
from service.observability.index_metrics import IndexCollector
from service.observability.replica_metrics import ReplicaCollector
from service.quality.metrics import QualityCollector
from service.search.query_cache_metrics import QueryCacheCollector

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self, quality: QualitySettings | None = None) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "ragserve_requests", "HTTP requests", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "ragserve_request_seconds", "HTTP request latency", ["method", "route"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.stage = Histogram(
            "ragserve_stage_seconds", "Latency per pipeline stage", ["stage"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.upstream_errors = Counter(
            "ragserve_upstream_errors", "Errors from runners", ["runner", "code"], registry=self.registry
        )
        self.replicas = ReplicaCollector()
        self.registry.register(self.replicas)
        self.query_cache = QueryCacheCollector()
        self.registry.register(self.query_cache)
        self.index = IndexCollector()
        self.registry.register(self.index)
        quality = quality or QualitySettings()
        self.quality = QualityCollector(max_collection_labels=quality.max_collection_labels,
                                        low_score_floors=quality.low_score_floors)
        self.registry.register(self.quality)

        self._children: dict[tuple[str, ...], Any] = {}

    def observe_stage(self, stage: str, seconds: float) -> None:
        self._child(self.stage, "stage", stage).observe(seconds)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self._child(self.requests, "requests", method, route, str(status)).inc()
        self._child(self.latency, "latency", method, route).observe(seconds)

    def _child(self, metric: Any, name: str, *labels: str) -> Any:
        """``metric.labels(*labels)``, kept: the client looks each one up under a lock with its labels checked
        (four per search). The label sets are bounded (route templates, stages, statuses), and a kept child is
        the one ``labels`` returns, as long as nothing removes it (nothing here does)."""
        key = (name, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child


class MetricsMiddleware:
    """Counts and times every request by its route template (not its raw path, to bound cardinality)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            path = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.observe_request(scope["method"], path, status, time.perf_counter() - started)
