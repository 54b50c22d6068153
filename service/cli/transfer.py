"""``ragserve export`` and ``ragserve import``: clients of the running API (an embedded store belongs to the
serving process, so no other process may open its folder), through :class:`service.client.Client`'s
``export_collection`` and ``import_collection``, with a progress line on stderr.

Progress counts points: the stream is decompressed beside the transfer and its lines counted (about 1% of the
time of the transfer itself), out of the header's ``points`` (the count when the export began).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from service.cli.client import add_api_options, connect
from service.transfer.format import SUFFIX

if TYPE_CHECKING:
    from service.client import APIError, Client, ImportResult


def cmd_export(args: argparse.Namespace) -> None:
    """Download a collection as a portable file (points, vectors, settings) through the running API."""
    with connect(args) as client:
        path = export_collection(client, args.collection, Path(args.output) if args.output else None,
                                 quiet=args.quiet)
    print(path)


def cmd_import(args: argparse.Namespace) -> None:
    """Upload an export file into a collection through the running API: no embedding call."""
    with connect(args) as client:
        result = import_collection(client, Path(args.file), args.collection, quiet=args.quiet)
    how = "resumed and finished" if result.resumed else "created" if result.created else "filled"
    print(f"{how} '{result.collection}': {result.points} points imported, {result.stored} stored "
          f"(export {result.export_id})")
    if result.quantization:
        print(f"{result.quantization} quantization recorded: searches oversample and rescore now, and "
              f"the collection's background builds (or `ragserve optimize {result.collection} --online`) build "
              "the quantized copy")


class Progress:
    """Counts the points in a gzip export stream as its compressed pieces go by, and draws a line."""

    def __init__(self, verb: str, *, quiet: bool) -> None:
        self._verb, self._quiet = verb, quiet
        self._unzip = zlib.decompressobj(31)
        self.lines = 0
        self.total: int | None = None
        self._head = b""
        self._drawn = 0.0
        self._started = time.monotonic()

    @property
    def points(self) -> int:
        return max(0, self.lines - 1)  # the header; the trailer's line is counted only once it ends

    def see(self, piece: bytes) -> None:
        try:
            raw = self._unzip.decompress(piece)
        except zlib.error:
            return  # the server's checks name what is wrong; the bar only counts
        if self.total is None and self.lines == 0:
            self._head += raw[:1 << 20]
            if b"\n" in self._head:
                self.total = json.loads(self._head.split(b"\n", 1)[0]).get("points")
        self.lines += raw.count(b"\n")
        now = time.monotonic()
        if not self._quiet and now - self._drawn >= 0.2:
            self._drawn = now
            self.draw()

    def draw(self) -> None:
        if self._quiet:
            return
        done = min(self.points, self.total) if self.total is not None else self.points
        rate = done / max(1e-9, time.monotonic() - self._started)
        if self.total:
            filled = int(24 * done / self.total)
            bar = f"[{'#' * filled}{'-' * (24 - filled)}] {100 * done / self.total:5.1f}% "
        else:
            bar = ""
        print(f"\r{self._verb} {bar}points {done}/{self.total if self.total is not None else '?'} "
              f"{rate:,.0f} points/s   ", end="", file=sys.stderr, flush=True)

    def end(self) -> None:
        if not self._quiet:
            self.draw()
            print(file=sys.stderr)


def _refusal(exc: APIError) -> SystemExit:
    """The API's refusal as the command's exit message. ``main`` would print the same for an APIError, but a
    caller of ``main`` in its own process (a test, a script) reads the message off the SystemExit."""
    return SystemExit(f"ragserve: error {exc}")


def export_collection(client: Client, collection: str, output: Path | None, *, quiet: bool = False) -> Path:
    """Download ``collection`` into ``output`` (default ``<collection>.ragserve.jsonl.gz``), written to a
    ``.part`` file first and renamed once whole."""
    from service.client import APIError

    target = output or Path(f"{collection}{SUFFIX}")
    partial = target.with_name(target.name + ".part")
    progress = Progress("exporting", quiet=quiet)
    try:
        client.export_collection(collection, partial, on_piece=progress.see)
    except APIError as exc:
        raise _refusal(exc) from None
    progress.end()
    os.replace(partial, target)
    return target


def import_collection(client: Client, path: Path, collection: str | None, *, quiet: bool = False) -> ImportResult:
    """Upload an export file into ``collection`` (default: the name in its header); the API's answer."""
    from service.client import APIError

    name = collection or read_header(path)["collection"]
    progress = Progress(f"importing into {name!r}", quiet=quiet)
    try:
        result = client.import_collection(name, path, on_piece=progress.see)
    except APIError as exc:
        progress.end()  # the whole file went before the answer: its line stays, the refusal under it
        raise _refusal(exc) from None
    progress.end()
    return result


def read_header(path: Path) -> dict:  # type: ignore[type-arg]
    import gzip

    try:
        with gzip.open(path, "rb") as f:
            header = json.loads(f.readline(64 << 20))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"ragserve: {path} is not a ragserve export: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != "ragserve-export":
        raise SystemExit(f"ragserve: {path} is not a ragserve export (its first line is no export header)")
    return header


def add_export(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("export", help="download a collection (points, vectors, settings) as a .ragserve.jsonl.gz "
                       "file, through the running API")
    p.add_argument("collection")
    p.add_argument("-o", "--output", default=None, help="the file (default: COLLECTION.ragserve.jsonl.gz)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    add_api_options(p)
    p.set_defaults(func=cmd_export)


def add_import(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("import", help="upload an export file into a new (or empty) collection, through the running "
                       "API, with no embedding call; run it again to finish one that was cut off")
    p.add_argument("file")
    p.add_argument("--collection", default=None, help="the target collection (default: the exported one's name)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    add_api_options(p)
    p.set_defaults(func=cmd_import)
