"""Sources yield files: a server folder or file (glob include/exclude), stored uploads, or URLs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from indexer.documents import FileError, SourceFile
from indexer.spec import PathSource
from service.client.paths import folder_entries


class SourceError(Exception):
    """The source as a whole cannot be read (the job fails; per-file problems are FileErrors instead)."""


def under_root(path: Path, roots: list[Path]) -> bool:
    real = path.resolve()
    return any(real == r.resolve() or r.resolve() in real.parents for r in roots)


def path_entries(source: PathSource) -> list[tuple[Path, str]]:
    """Files of a path source with their names (the path relative to the root), sorted, unread."""
    root = Path(source.path)
    if root.is_file():
        return [(root, source.name_prefix + root.name)]
    if not root.is_dir():
        raise SourceError(f"{source.path!r} is not a file or folder")
    # the client walks an uploaded folder by the same rule (service.client.paths): one copy of it
    return folder_entries(root, include=source.include, exclude=source.exclude, recursive=source.recursive,
                          name_prefix=source.name_prefix)


def path_files(source: PathSource, *, max_bytes: int) -> Iterator[SourceFile | FileError]:
    for path, name in path_entries(source):
        yield read_file(path, name, max_bytes)


def read_file(path: Path, name: str, max_bytes: int) -> SourceFile | FileError:
    try:
        size = os.path.getsize(path)
        if size > max_bytes:
            return FileError(name, f"file is {size} bytes; the limit is {max_bytes}")
        return SourceFile(name, path.read_bytes())
    except OSError as exc:
        return FileError(name, f"cannot read: {exc.strerror or exc}")
