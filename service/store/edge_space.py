"""The embedded store's guard against a full disk: what a write needs free, and what the engine's errors say
about space. Why a write is checked before the engine is called: :mod:`service.store.edge`'s docstring, "A full
disk"."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from service.store.errors import StoreError, StoreFull
from service.store.types import Chunk, SparseVector


def check_free_space(root: Path, min_free: int, need_bytes: int) -> None:
    """:class:`StoreFull` unless the disk holding ``root`` has ``min_free`` + ``need_bytes`` bytes free."""
    try:
        st = os.statvfs(root)
    except OSError as exc:
        raise StoreError(f"the embedded store's folder cannot be read: {exc.strerror}") from exc
    free = st.f_bavail * st.f_frsize
    if free < min_free + need_bytes:
        raise StoreFull(
            f"the data disk is full: {free / 2**20:.1f} MiB free, and this write needs "
            f"{need_bytes / 2**20:.1f} MiB above the {min_free / 2**20:.0f} MiB the embedded store keeps "
            "in reserve (RAGSERVE_QDRANT__EDGE_MIN_FREE_MB). Nothing was written; searches go on, and writes "
            "work again once space is freed"
        )


NEW_SHARD_BYTES = 64 << 20
"""What a new shard takes on disk (measured on tmpfs: 7.2 MB at once, then its first load writes out its WAL's
two 32 MB segments, from 8.7 to 55 MB), so that a new collection can still be opened after a restart."""


SMALL_WRITE_BYTES = 1 << 20


WRITE_COPIES = 3
"""A point is written about three times before its write returns: the WAL, the segment, the payload indexes."""


def _write_bytes(chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]],
                 sparse: Sequence[SparseVector | None] | None) -> int:
    """An upper estimate of the bytes one engine write of these points puts on the disk."""
    size = 0
    for i, c in enumerate(chunks):
        size += 256 + len(c.text.encode("utf-8")) + len(json.dumps(c.metadata, ensure_ascii=False, default=str))
        s = sparse[i] if sparse is not None else None
        size += 4 * len(vectors[i]) + (8 * len(s.indices) if s is not None else 0)
    return WRITE_COPIES * size


def _allocated_bytes(folders: Sequence[Path]) -> int:
    """What copies of these folders take on disk (without holes: ``service.store.files.copy_sparse``)."""
    return sum(p.stat().st_blocks * 512 for folder in folders for p in folder.rglob("*") if p.is_file())


NO_SPACE = "no space left on the data disk"


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if "No space left" in text or "os error 28" in text:
        return NO_SPACE
    return text[:300]
