"""The builder process of a background index build: ``python -m service.store.edge_build FOLDER SPEC_JSON``.

It loads the copy of a live shard that the store made (:mod:`service.store.edge_background`), builds its index
as ``ragserve optimize`` would (HNSW, or what the collection's quantization asks: the same optimizer config), flushes,
closes, and prints one JSON line saying what it built. The engine holds the GIL for the whole ``optimize``, which
is why it runs here and never in the store's process; it runs niced, so the serving process keeps the cores it
needs. Exit status 0 means the copy is built and closed; anything else (an error, a signal) means the store
gives the build up and deletes the copy.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from typing import Any

import qdrant_edge as qe

from service.store.edge_optimize import INDEXING_THRESHOLD_KB, _dense_indexed
from service.store.edge_shard import _config
from service.store.types import HNSW

PR_SET_PDEATHSIG = 1


def build_spec(dimensions: int, sparse: bool, quantization: str | None, nice: int, segment_kb: int) -> dict[str, Any]:
    """What the builder is told on its command line."""
    return {"dimensions": dimensions, "sparse": sparse, "quantization": quantization, "nice": nice,
            "segment_kb": segment_kb}


def build(folder: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Build the index of the shard in ``folder`` in this process; what was built, for the store's status."""
    if spec.get("nice"):
        os.nice(int(spec["nice"]))
    # Segments of at most segment_kb: the unindexed points become a segment of their own, or merge into the
    # smallest indexed one below that size, so a build at a million points reads and writes a part of the shard,
    # not all of it (its memory: docs/background-builds.md).
    every_segment = qe.EdgeOptimizersConfig(indexing_threshold=INDEXING_THRESHOLD_KB,
                                            max_segment_size=int(spec["segment_kb"]))
    shard = qe.EdgeShard.load(folder, _config(int(spec["dimensions"]), bool(spec["sparse"]), every_segment,
                                              quantization=spec["quantization"]))
    try:
        shard.optimize()
        shard.flush()
        info = shard.info()
        indexed = _dense_indexed(shard, info.indexed_vectors_count, info.points_count, bool(spec["sparse"]))
    finally:
        shard.close()
    return {"built": spec["quantization"] or HNSW, "points": info.points_count, "indexed": indexed}


def die_with_parent() -> None:
    """Linux: end this process when the store's process ends (a SIGKILLed store must not leave a builder writing
    into a folder that its restart deletes)."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the store died before the call
        os._exit(1)


if __name__ == "__main__":
    die_with_parent()
    print(json.dumps(build(sys.argv[1], json.loads(sys.argv[2]))), flush=True)
