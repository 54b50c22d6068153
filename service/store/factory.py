"""Open the store the settings name: a Qdrant server by URL, else the embedded Qdrant Edge store."""

from __future__ import annotations

from typing import Any

from qdrant_client import AsyncQdrantClient

from service.config import Settings
from service.store.base import VectorStore
from service.store.edge import EdgeStore
from service.store.proxy import ProcessStore
from service.store.qdrant_server import ServerStore, open_client
from service.store.qdrant_snapshots import SnapshotApi
from service.store.types import quantization_named


async def open_store(settings: Settings, *, client: AsyncQdrantClient | None = None) -> VectorStore:
    """``client`` (tests only) is a qdrant-client to run the server backend on, e.g. its local mode."""
    q = settings.qdrant
    if client is not None or q.url:
        key = q.api_key.get_secret_value() if q.api_key else None
        snapshot_api = None if client is not None else snapshot_client(settings)
        client = client or open_client(url=q.url, api_key=key, timeout_s=q.timeout_s)
        return ServerStore(
            client, max_concurrency=q.max_concurrency, timeout_s=q.timeout_s, metadata_ttl_s=q.metadata_ttl_s,
            topology={"shard_number": q.shard_number, "replication_factor": q.replication_factor,
                      "write_consistency_factor": q.write_consistency_factor},
            snapshot_api=snapshot_api,
        )
    if q.edge_socket is not None:  # one of several API processes: the store owner holds the folder
        return await ProcessStore.attach(settings.qdrant_path, q.edge_socket, min_free_bytes=q.edge_min_free_mb << 20)
    opener = ProcessStore.open if q.edge_process else EdgeStore.open
    return await opener(settings.qdrant_path, **edge_options(settings))


def edge_options(settings: Settings) -> dict[str, Any]:
    """The embedded store's options, as its opener (in this process, its child, or the store owner) takes them."""
    q = settings.qdrant
    return {"max_concurrency": q.max_concurrency, "timeout_s": q.timeout_s, "threads": q.edge_threads,
            "search_threads": q.edge_search_threads, "write_batch": q.edge_write_batch, "hnsw_ef": q.hnsw_ef,
            "int8_oversampling": q.int8_oversampling,
            "min_free_bytes": q.edge_min_free_mb << 20, "background_build": q.edge_build,
            "build_threshold": q.edge_build_threshold, "build_nice": q.edge_build_nice,
            "build_hold": q.edge_build_hold, "build_max_unindexed": q.edge_build_max_unindexed,
            "build_segment_kb": q.edge_build_segment_mb << 10,
            "quantization": quantization_named(q.edge_quantization),
            "build_overrides": {name: o.model_dump(exclude_none=True) for name, o in q.edge_build_collections.items()}}


def snapshot_client(settings: Settings, url: str | None = None) -> SnapshotApi:
    """The snapshot endpoints of the Qdrant server at ``url`` (default: the settings'), with the settings' key."""
    q = settings.qdrant
    target = url or q.url
    if not target:
        raise ValueError("no Qdrant server URL")
    return SnapshotApi.open(url=target, api_key=q.api_key.get_secret_value() if q.api_key else None,
                            connect_timeout_s=q.timeout_s, timeout_s=q.snapshot_timeout_s)
