"""Snapshots of the folder format written by the test itself (one small file; no engine), for the listing and
retention claims that need several sealed snapshots with chosen ids."""

from __future__ import annotations

import json
from pathlib import Path

from service.store import snapshots


def sealed_snapshot(root: Path, snapshot_id: str) -> Path:
    """A sealed snapshot ``snapshot_id`` under ``root``: one collection ``kb`` whose ``collection.json`` holds the id."""
    dest = root / snapshot_id
    folder = snapshots.staging(dest)
    (folder / "collections" / "kb").mkdir(parents=True)
    (folder / "collections" / "kb" / "collection.json").write_text(json.dumps({"id": snapshot_id}))
    return snapshots.seal(folder, dest, backend="edge", engine={"name": "test", "version": "0"}, counts={"kb": 1},
                          marker=None).path
