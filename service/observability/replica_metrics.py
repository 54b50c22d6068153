"""Per-replica Prometheus metrics of the runner pools, read from the pools when scraped.

Series, each labelled ``runner`` (embedding, rerank, generate) and ``replica`` (its base URL):

- ``ragserve_runner_replica_in_flight``: requests this process has in flight there now;
- ``ragserve_runner_replica_chosen_total``: attempts routed there (a retry elsewhere counts for both);
- ``ragserve_runner_replica_errors_total{kind}``: ``connect``, ``lost``, ``timeout``, ``status`` (429/5xx),
  ``health`` (a failed health check);
- ``ragserve_runner_replica_up``: 1 while its breaker is closed, 0 while it is out (open, or half-open
  waiting for its trial).

A collector rather than labelled counters: replicas come and go with DNS, and a replica that left the pool
simply stops being reported instead of leaving a stale series behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service.upstream.replica import ReplicaStats

ERROR_KINDS = ("connect", "lost", "timeout", "status", "health")


class Pooled(Protocol):
    name: str

    def replica_stats(self) -> Sequence[ReplicaStats]: ...


class ReplicaCollector(Collector):
    def __init__(self) -> None:
        self._runners: list[Pooled] = []

    def watch(self, runners: Iterable[Pooled]) -> None:
        """Report these runners from now on (replacing any watched before: one lifespan's clients)."""
        self._runners = list(runners)

    def collect(self) -> Iterator[Metric]:
        labels = ["runner", "replica"]
        in_flight = GaugeMetricFamily("ragserve_runner_replica_in_flight", "Requests in flight to the replica",
                                      labels=labels)
        chosen = CounterMetricFamily("ragserve_runner_replica_chosen", "Attempts routed to the replica",
                                     labels=labels)
        errors = CounterMetricFamily("ragserve_runner_replica_errors", "Failed attempts and health checks",
                                     labels=[*labels, "kind"])
        up = GaugeMetricFamily("ragserve_runner_replica_up", "1 while the replica takes requests (breaker closed)",
                               labels=labels)
        for runner in self._runners:
            for stats in runner.replica_stats():
                key = [runner.name, stats.url]
                in_flight.add_metric(key, stats.in_flight)
                chosen.add_metric(key, stats.chosen)
                up.add_metric(key, 1.0 if stats.state == "closed" else 0.0)
                for kind in ERROR_KINDS:
                    errors.add_metric([*key, kind], stats.errors.get(kind, 0))
        yield from (in_flight, chosen, errors, up)
