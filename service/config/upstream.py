"""``RAGSERVE_UPSTREAM__*``: timeouts, concurrency and retries toward the runners."""

from __future__ import annotations

from pydantic import BaseModel, Field

PRIORITY_SCHEDULED_RUNNERS = ("embedding", "rerank")
"""Runners whose bulk requests carry ``RAGSERVE_UPSTREAM__BULK_PRIORITY`` (and which the launcher starts with
``--scheduling-policy priority`` when it is set)."""


class UpstreamSettings(BaseModel):
    """Timeouts, concurrency and retries toward the runners."""

    connect_timeout_s: float = Field(
        2.0, description="Connect timeout toward a runner; a connection not made is retried within the call's deadline."
    )
    embed_timeout_s: float = Field(30.0, description="Read timeout for query embeddings.")
    embed_batch_timeout_s: float = Field(
        300.0, description="Read timeout for a batch of documents (waits behind other batches in the runner)."
    )
    rerank_timeout_s: float = Field(30.0, description="Per-request read timeout toward the reranker.")
    max_concurrency: int = Field(16, description="Query requests in flight per runner; more wait, bounded.")
    acquire_timeout_s: float = Field(5.0, description="A query waiting longer than this for a slot answers 429.")
    bulk_max_inflight: int = Field(
        2, ge=1, description="Bulk (indexing, documents) requests in flight per runner and process, in a lane of "
        "their own: vLLM serves first come first served, so a query waits behind at most this many batches.",
    )
    bulk_priority: int = Field(
        0, ge=0, description="vLLM request priority of bulk requests to the embedding and rerank runners (0: none "
        "sent). With 1, runners started with --scheduling-policy priority (the launcher adds it then) serve waiting "
        "queries before waiting bulk work. The generator is not started so and is sent none.",
    )
    retries: int = Field(2, description="Retries for idempotent calls on 429/5xx/connection errors.")
    backoff_s: float = Field(0.2, description="First backoff; doubles each retry (up to 2 s), with jitter.")
    breaker_threshold: int = Field(
        3, ge=1, description="Connection failures in a row after which a runner is taken as down: queries then "
        "answer 503 at once until its /health answers again.",
    )
    probe_interval_s: float = Field(1.0, description="How often /health is probed while a runner is down.")
    probe_timeout_s: float = Field(1.0, description="Timeout of one such probe.")
    unavailable_retry_after_s: float = Field(5.0, description="Retry-After of a 503 for a runner that is down.")
    health_interval_s: float = Field(
        2.0, gt=0, description="How often each replica of a pool of several is asked /health; a failed check counts "
        "like a refused connection toward breaker_threshold, which takes the replica out until it answers again.",
    )
    dns_refresh_s: float = Field(
        5.0, gt=0, description="How often a dns+ runner URL is resolved again (replicas join and leave).",
    )
    affinity_load_factor: float = Field(
        1.25, ge=1.0, description="Chat requests go to their prompt prefix's replica unless it holds more than this "
        "many times its fair share of the requests in flight (bounded-load consistent hashing); then the next one.",
    )
    embed_batch_size: int = Field(64, description="Texts per /v1/embeddings request: when upserting, and for the "
                                  "queries of one event-loop turn, sent together.")

    def bulk_priority_for(self, runner: str) -> int:
        """The priority bulk requests to ``runner`` carry, and so whether the launcher starts it scheduling by
        priority: the pooling runners get ``bulk_priority``. The generator gets none: vLLM 0.32 ignores a
        priority it does not schedule by (and its docs say it may refuse one), and priority scheduling of chat
        against picture descriptions is not shown to help, so it is not claimed."""
        return self.bulk_priority if runner in PRIORITY_SCHEDULED_RUNNERS else 0
