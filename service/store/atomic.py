"""Atomic file replacement for the embedded store's small JSON files (the folder marker, ``collection.json``).

Written to a temporary file beside the target, fsynced, renamed over it, and the directory fsynced: a crash
leaves the old file or the new one, never a torn one, and the rename itself survives a power loss.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
