"""``RAGSERVE_QDRANT__*``: the store (embedded Qdrant Edge, or a Qdrant server)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr


class EdgeBuildOverride(BaseModel):
    """One collection's background builds, where they differ from the store's."""

    enabled: bool | None = Field(None, description="Build this collection's index in the background (None: "
                                 "edge_build).")
    threshold: int | None = Field(None, ge=1, description="Unindexed points that start its build (None: "
                                  "edge_build_threshold).")


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
    hnsw_ef: int = Field(
        512, ge=1, description="Embedded store: HNSW search breadth, once a build (background or `ragserve "
        "optimize`) made HNSW segments. At 1M x 1024 built in the background (two segments): recall@10 0.963 "
        "against exact at 6.6 CPU-ms per dense search; 256 gave 0.931 at 4.1 (docs/store-benchmark.md).",
    )
    int8_oversampling: float = Field(
        2.0, ge=1.0, description="Embedded store, collections quantized by `ragserve optimize --int8`: a dense search "
        "takes this many times its limit from the int8 scan and rescores them with the float vectors (1 rescores "
        "only the int8 top-k: recall@10 0.94 at 100k x 1024 against 1.000 with 2; docs/store-benchmark.md).",
    )
    edge_quantization: Literal["none", "int8", "hnsw-int8"] = Field(
        "none", description="Embedded store: what a collection created from now on builds (a collection keeps what "
        "it was created with). none: an HNSW graph over the float vectors. hnsw-int8: int8 copies of the vectors "
        "and an HNSW graph over them, built and walked on int8 distances, its candidates rescored with the float "
        "vectors (int8_oversampling). At 1M x 1024 loaded while serving: dense 5.7 CPU-ms at recall@10 0.960 against "
        "12.2 and 0.972 for the float graph, loaded at 751 points/s against 470-516, for 1 GB of RAM per million "
        "1024-dim vectors (twice while a build swaps in) and a longer stall at each swap (docs/store-benchmark.md). "
        "int8: the int8 copies with no graph, a full scan over them (as `ragserve optimize --int8`).",
    )
    edge_min_free_mb: int = Field(
        64, ge=0, description="Embedded store: free space kept on the data disk; a write that would go below it is "
        "refused with 507 store_full (the engine's memory-mapped files would crash the process on a full disk).",
    )
    edge_build: bool = Field(
        True, description="Embedded store: build a collection's index (HNSW, or int8 once it is int8) in the "
        "background while it serves, once edge_build_threshold of its points are unindexed: a copy of its shard is "
        "built by a process of its own, caught up with the writes made meanwhile and swapped in "
        "(docs/background-builds.md). false: only `ragserve optimize`, with the store closed, builds.",
    )
    edge_build_threshold: int = Field(
        20_000, ge=1, description="Embedded store: unindexed points (written since the last build) that start a "
        "background build.",
    )
    edge_build_collections: dict[str, EdgeBuildOverride] = Field(
        default_factory=dict, description="Embedded store: per collection, a switch and a threshold that override "
        "edge_build and edge_build_threshold for it, as JSON: "
        '{"logs": {"enabled": false}, "kb": {"threshold": 5000}}.',
    )
    edge_build_nice: int = Field(
        10, ge=0, le=19, description="Embedded store: the niceness added to a background build's process, so the "
        "serving process keeps the CPU it needs.",
    )
    edge_build_max_unindexed: int = Field(
        100_000, ge=0, description="Embedded store: while a collection's build runs and this many of its points are "
        "unindexed, its writes wait for the build's swap: searches scan the unindexed points exactly, so this "
        "bounds their cost (about 22 CPU-ms per 100,000 points of 1024 dimensions) at the price of ingest speed "
        "where writes outpace the builder (docs/background-builds.md). 0: writes never wait.",
    )
    edge_build_segment_mb: int = Field(
        2048, ge=16, description="Embedded store: the largest segment a background build makes, in MB of dense "
        "vectors: a build indexes the points written since the last one into a segment of their own, or merged "
        "into the smallest indexed one below this size, so it reads and writes at most about twice this much, "
        "not the whole collection (docs/background-builds.md).",
    )
    edge_build_hold: str | None = Field(
        None, description="Tests only: while this file exists, a background build waits between building its copy "
        "and catching it up (its phase says held), so a test can act at that point (tests/faults).",
    )
    shard_number: int | None = Field(None, description="Shards per new collection (server; default: Qdrant's).")
    replication_factor: int | None = Field(None, description="Copies of each shard (a Qdrant cluster).")
    write_consistency_factor: int | None = Field(None, description="Replicas that must ack a write.")
