"""Which files of a folder are indexed: the one rule the client (uploading a folder) and the indexer (reading a
server path, :mod:`indexer.sources`) share, so ``ingest_path`` picks the same files either way.

It lives here, not in the indexer, because the client is its own distribution (``ragserve-client``) and imports
nothing of the server; the indexer imports it from here.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from pathlib import Path

SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})
"""Folders of generated files, never documents: skipped like hidden ones."""


def name_prefix_problem(value: str) -> str | None:
    """Why a name prefix cannot go before document ids (None when it can): a prefix is a relative path."""
    if value.startswith("/") or ".." in value.split("/"):
        return "must be a relative path without '..'"
    return None


def _matches(rel: str, patterns: Sequence[str]) -> bool:
    for pattern in patterns:
        if fnmatch.fnmatchcase(rel, pattern):
            return True
        if pattern.startswith("**/") and fnmatch.fnmatchcase(rel, pattern[3:]):
            return True
    return False


def folder_entries(root: Path, *, include: Sequence[str], exclude: Sequence[str], recursive: bool = True,
                   name_prefix: str = "") -> list[tuple[Path, str]]:
    """The files under a folder with their names (the path relative to ``root``, after ``name_prefix``), sorted,
    unread: hidden files and folders, caches and symlinks skipped, then ``include`` and ``exclude`` globs."""
    walker = root.rglob("*") if recursive else root.glob("*")
    entries = []
    for path in sorted(walker):
        if not path.is_file() or path.is_symlink():
            continue
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") or part in SKIPPED_DIRS for part in rel.split("/")):
            continue  # hidden files and folders (.git, .DS_Store), caches (__pycache__)
        if _matches(rel, include) and not _matches(rel, exclude):
            entries.append((path, name_prefix + rel))
    return entries


def path_entries(path: Path, *, include: Sequence[str], exclude: Sequence[str], name_prefix: str = "") -> list[
        tuple[Path, str]]:
    """A file (named by its file name) or a folder's files (:func:`folder_entries`), with their names."""
    if path.is_file():
        return [(path, name_prefix + path.name)]
    if not path.is_dir():
        raise ValueError(f"{str(path)!r} is not a file or folder")
    return folder_entries(path, include=include, exclude=exclude, name_prefix=name_prefix)


def read_files(entries: Sequence[tuple[Path, str]]) -> tuple[list[tuple[str, bytes]], list[tuple[str, str]]]:
    """The entries' bytes by name, and (name, why) for each that cannot be read. No size limit here: the server
    applies its own."""
    files: list[tuple[str, bytes]] = []
    skipped: list[tuple[str, str]] = []
    for path, name in entries:
        try:
            files.append((name, path.read_bytes()))
        except OSError as exc:
            skipped.append((name, f"cannot read: {exc.strerror or exc}"))
    return files, skipped
