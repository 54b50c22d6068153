"""The one settings class. Every knob is an environment variable with the ``RAGSERVE_`` prefix;
nested sections use ``__`` (``RAGSERVE_LIMITS__MAX_DOCUMENTS_PER_REQUEST=500``). A ``RAGSERVE_`` variable
that names no setting stops start-up, naming the nearest valid one (a typo is never silently ignored)."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from service.config.common import (
    CLIENT_VARIABLES,
    ENV_PREFIX,
    NOT_SETTINGS,
    NOT_SETTINGS_PREFIXES,
    PLACEHOLDER_KEYS,
    _comma_list,
)
from service.config.context import ContextSettings
from service.config.engine import EngineSettings
from service.config.fetch import FetchSettings
from service.config.generation import GenerationSettings
from service.config.indexer import IndexerSettings
from service.config.ingest import IngestSettings
from service.config.keys import ApiKeyEntry
from service.config.limits import Limits
from service.config.media import MediaSettings
from service.config.ocr import OcrSettings
from service.config.otel import OtelSettings
from service.config.qdrant import QdrantSettings
from service.config.quality import QualitySettings, QueryLogSettings
from service.config.query_cache import QueryCacheSettings
from service.config.runners import RunnerSettings
from service.config.search import SearchSettings
from service.config.upstream import UpstreamSettings
from service.config.vision import VisionSettings


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
    query_log: QueryLogSettings = Field(default_factory=QueryLogSettings)
    quality: QualitySettings = Field(default_factory=QualitySettings)
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
    def query_log_path(self) -> Path:
        return self.query_log.path or self.data_dir / "querylog.sqlite3"

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
                         + ". Every RAGSERVE_ variable must name a setting (service/config/).")


@lru_cache
def get_settings() -> Settings:
    """Settings from the environment, built on first use (never at import time)."""
    return Settings()
