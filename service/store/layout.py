"""The embedded store's folder: its marker, the layout and engine versions it records, its one-process lock.

The marker, ``ragserve-store.json``, says the folder is ours and how to read it::

    {"engine": "qdrant-edge", "layout": 2, "engine_version": "0.9.0", "ragserve_version": "0.1.0"}

Layouts:

1. ``{"engine": "qdrant-edge", "layout": 1}`` (a marker without ``layout`` is layout 1 too).
2. The marker also records the ``qdrant-edge-py`` and ragserve versions that last wrote it; the data is as in 1.

Every opening checks the marker (:func:`check_layout`, read-only: the server's preflight, the store process,
``ragserve optimize``); :func:`lock_store` then takes the lock and brings the marker up to date under it:

- no marker and an empty folder: a new store, the marker written;
- another engine, qdrant-client's local mode, or files without a marker: :class:`LegacyStoreLayout`;
- an older layout: :class:`StoreLayoutOutdated`, naming ``ragserve store migrate`` (:mod:`service.store.migrate`);
- a newer layout, or an engine version newer than the installed ``qdrant-edge-py`` (an older engine may not read
  a newer one's files): :class:`StoreLayoutTooNew`;
- an older engine version: accepted, the marker rewritten with the installed one, and a log line says so.

:data:`MIGRATIONS` holds one step per layout: ``MIGRATIONS[n - 1]`` takes a layout-``n`` folder to ``n + 1``,
so a layout 3 is one more function (and ``LAYOUT = 3``).
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import logging
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from packaging.version import InvalidVersion, Version

from service import __version__
from service.store.atomic import write_json
from service.store.errors import LegacyStoreLayout, StoreLayoutOutdated, StoreLayoutTooNew, StoreLocked

log = logging.getLogger("ragserve.store")

MARKER = "ragserve-store.json"
ENGINE = "qdrant-edge"
ENGINE_DISTRIBUTION = "qdrant-edge-py"
LAYOUT = 2
LAYOUT1_ENGINE = "0.9.0"
"""The engine that wrote every layout-1 folder: ``qdrant-edge-py`` was pinned to 0.9.0 from the first embedded
store until layout 2."""

Marker = dict[str, Any]


def engine_version() -> str:
    """The installed ``qdrant-edge-py``, as its distribution's metadata says."""
    return importlib.metadata.version(ENGINE_DISTRIBUTION)


def current_marker() -> Marker:
    return {"engine": ENGINE, "layout": LAYOUT, "engine_version": engine_version(), "ragserve_version": __version__}


def migrate_command(root: Path) -> str:
    """The command that migrates ``root``, as the user types it: ``--data-dir`` where ``root`` is a data
    folder's ``qdrant`` (the default), else the store folder itself through ``RAGSERVE_QDRANT__PATH``."""
    if root.name == "qdrant":
        return f"ragserve store migrate --data-dir {shlex.quote(str(root.parent))}"
    return f"RAGSERVE_QDRANT__PATH={shlex.quote(str(root))} ragserve store migrate"


def read_marker(root: Path) -> Marker | None:
    """The marker, or None where there is none; :class:`LegacyStoreLayout` for one that is not a JSON object."""
    path = root / MARKER
    if not path.is_file():
        return None
    try:
        marker = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise LegacyStoreLayout(root, f"its marker {MARKER} is not JSON ({exc})") from None
    if not isinstance(marker, dict):
        raise LegacyStoreLayout(root, f"its marker {MARKER} is not a JSON object")
    return marker


def layout_of(root: Path, marker: Marker) -> int:
    """The marker's layout (1 where it names none); :class:`LegacyStoreLayout` for another engine's marker."""
    if marker.get("engine") != ENGINE:
        raise LegacyStoreLayout(root, f"its marker names engine {marker.get('engine')!r}")
    layout = marker.get("layout", 1)
    if not isinstance(layout, int) or isinstance(layout, bool) or layout < 1:
        raise LegacyStoreLayout(root, f"its marker's layout {layout!r} is not a layout number")
    return layout


def check_layout(root: Path) -> Marker | None:
    """Refuse a folder this ragserve cannot open (see the module's docstring); return its marker, or None for a
    new (missing or empty) folder. Reads only: nothing in the folder changes."""
    marker = read_marker(root)
    if marker is None:
        if (root / "meta.json").is_file() or (root / "collection").is_dir():
            raise LegacyStoreLayout(root, "it was written by qdrant-client's local mode (ragserve before Qdrant Edge)")
        if root.exists() and any(p.name != ".lock" for p in root.iterdir()):
            raise LegacyStoreLayout(root, "it is not empty and holds no ragserve store marker")
        return None
    layout = layout_of(root, marker)
    written_by = f"ragserve {marker.get('ragserve_version', 'unknown')}"
    if layout > LAYOUT:
        raise StoreLayoutTooNew(root, f"{written_by} with layout {layout}", f"layout {LAYOUT}")
    if layout < LAYOUT:
        raise StoreLayoutOutdated(root, layout, LAYOUT, migrate_command(root))
    written, installed = _engine_version(root, marker), Version(engine_version())
    if written > installed:
        raise StoreLayoutTooNew(root, f"{written_by} with {ENGINE_DISTRIBUTION} {written}",
                                f"the files of {ENGINE_DISTRIBUTION} {installed} and older (the engine installed)")
    return marker


def _engine_version(root: Path, marker: Marker) -> Version:
    try:
        return Version(str(marker["engine_version"]))
    except (KeyError, InvalidVersion):
        found = marker.get("engine_version")
        raise LegacyStoreLayout(root, f"its layout-{LAYOUT} marker has no valid engine_version ({found!r})") from None


def adopt(root: Path) -> None:
    """With the lock held: check the folder again (a migrate may have finished since the first look) and write
    the current marker where it has none or an older one (an older engine, another ragserve)."""
    marker = check_layout(root)
    current = current_marker()
    if marker is not None and all(marker.get(k) == v for k, v in current.items()):
        return
    if marker is not None and marker.get("engine_version") != current["engine_version"]:
        log.warning("store folder %s: written by %s %s, opened with %s %s; its marker now names %s", root,
                    ENGINE_DISTRIBUTION, marker.get("engine_version"), ENGINE_DISTRIBUTION,
                    current["engine_version"], current["engine_version"])
    write_json(root / MARKER, {**(marker or {}), **current})


def take_lock(root: Path) -> IO[str]:
    """The folder's exclusive lock (``.lock``, flock), held while the returned file is open; the file says which
    process holds it. :class:`StoreLocked` where another process does."""
    f = open(root / ".lock", "a+")  # noqa: SIM115 - held open for as long as the lock
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise StoreLocked(root, holder) from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}\n")
    f.flush()
    return f


def lock_store(root: Path) -> IO[str]:
    """Open the folder for this process: refuse another layout, take the lock (:class:`StoreLocked` if held),
    bring the marker up to date (create the layout on first use)."""
    check_layout(root)
    root.mkdir(parents=True, exist_ok=True)
    f = take_lock(root)
    try:
        adopt(root)
        (root / "collections").mkdir(exist_ok=True)
    except BaseException:
        f.close()
        raise
    return f


def probe_store(root: Path) -> None:
    """Refuse, before a server starts, a folder it could not open: another layout, or held by a process."""
    check_layout(root)
    if (root / ".lock").is_file():
        with open(root / ".lock", "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                raise StoreLocked(root, f.read().strip() or "another process") from None
            fcntl.flock(f, fcntl.LOCK_UN)


# --- migrations: MIGRATIONS[n - 1] takes a layout-n folder (and its marker) to layout n + 1 -------------------

def _layout1_to_2(root: Path, marker: Marker) -> Marker:
    """Layout 2 records the versions that wrote the folder; its files are layout 1's."""
    return {**marker, "layout": 2, "engine_version": LAYOUT1_ENGINE, "ragserve_version": __version__}


MIGRATIONS: list[Callable[[Path, Marker], Marker]] = [_layout1_to_2]
