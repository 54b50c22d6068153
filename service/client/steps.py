"""The steps a sans-I/O operation yields (:mod:`service.client.protocol`): plain data, importing nothing of the
client, so every client module can depend on it and none on another in a circle."""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import httpx

T = TypeVar("T")
PIECE = 1 << 20


@dataclass(frozen=True)
class Upload:
    """A file sent as a request's body, read piece by piece as it goes (never whole in memory), each piece
    passed to ``on_piece`` (a progress line). A retried request reads it again from its start."""

    path: Path
    on_piece: Callable[[bytes], None] | None = None

    def pieces(self) -> Iterator[bytes]:
        with open(self.path, "rb") as f:
            while piece := f.read(PIECE):
                if self.on_piece is not None:
                    self.on_piece(piece)
                yield piece

    async def apieces(self) -> AsyncIterator[bytes]:
        # httpx's AsyncClient takes only an async body; a local file's read of one piece is short enough to
        # do on the loop, as the sync client does it
        for piece in self.pieces():
            yield piece


@dataclass(frozen=True)
class Download:
    """Where a streamed answer's body goes: written to ``path`` as sent (an export stays gzip), piece by piece,
    each passed to ``on_piece``, then flushed to disk, so a file that is there once the call returns is whole."""

    path: Path
    on_piece: Callable[[bytes], None] | None = None

    def write(self, pieces: Iterable[bytes]) -> None:
        with open(self.path, "wb") as f:
            for piece in pieces:
                self._write(f, piece)
            f.flush()
            os.fsync(f.fileno())

    async def awrite(self, pieces: AsyncIterable[bytes]) -> None:
        # a local file's write of one piece is short next to the network's wait for the next (see apieces)
        with open(self.path, "wb") as f:  # noqa: ASYNC230
            async for piece in pieces:
                self._write(f, piece)
            f.flush()
            os.fsync(f.fileno())

    def _write(self, f: BinaryIO, piece: bytes) -> None:
        f.write(piece)
        if self.on_piece is not None:
            self.on_piece(piece)


@dataclass(frozen=True)
class Call:
    """One HTTP exchange, relative to the client's base URL."""

    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    files: list[tuple[str, tuple[str, bytes, str]]] | None = None
    data: dict[str, str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    upload: Upload | None = None
    download: Download | None = None


@dataclass(frozen=True)
class Sleep:
    seconds: float


Step = Call | Sleep
Operation = Generator[Step, "httpx.Response | None", T]
"""Yields steps, is sent each Call's response (None after a Sleep), returns the result."""
