"""``ragserve export`` and ``ragserve import``: clients of the running API (an embedded store belongs to the
serving process, so no other process may open its folder), with a progress line on stderr.

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
from collections.abc import Iterator
from pathlib import Path

import httpx

from service.cli.client import add_api_options, api_location
from service.transfer.format import SUFFIX

PIECE = 1 << 20
TIMEOUT = httpx.Timeout(600.0, connect=10.0)


def cmd_export(args: argparse.Namespace) -> None:
    """Download a collection as a portable file (points, vectors, settings) through the running API."""
    url, key = api_location(args)
    path = export_collection(url, key, args.collection, Path(args.output) if args.output else None, quiet=args.quiet)
    print(path)


def cmd_import(args: argparse.Namespace) -> None:
    """Upload an export file into a collection through the running API: no embedding call."""
    url, key = api_location(args)
    result = import_collection(url, key, Path(args.file), args.collection, quiet=args.quiet)
    how = "resumed and finished" if result["resumed"] else "created" if result["created"] else "filled"
    print(f"{how} '{result['collection']}': {result['points']} points imported, {result['stored']} stored "
          f"(export {result['export_id']})")
    if result.get("quantization"):
        print(f"{result['quantization']} quantization recorded: searches oversample and rescore now, and "
              f"`ragserve optimize {result['collection']}` (with the service stopped) builds the quantized copy")


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


def _refusal(response: httpx.Response) -> SystemExit:
    try:
        error = response.json()["error"]
        return SystemExit(f"ragserve: error {response.status_code} {error['code']}: {error['message']}")
    except (ValueError, KeyError, TypeError):
        return SystemExit(f"ragserve: error {response.status_code}: {response.text[:500]}")


def export_collection(url: str, key: str, collection: str, output: Path | None, *, quiet: bool = False) -> Path:
    """Download ``collection`` into ``output`` (default ``<collection>.ragserve.jsonl.gz``), written to a
    ``.part`` file first and renamed once whole."""
    target = output or Path(f"{collection}{SUFFIX}")
    partial = target.with_name(target.name + ".part")
    progress = Progress("exporting", quiet=quiet)
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT) as http, \
            http.stream("GET", f"/v1/collections/{collection}/export") as response:
        if response.status_code != 200:
            response.read()
            raise _refusal(response)
        with open(partial, "wb") as f:
            for piece in response.iter_raw(PIECE):
                f.write(piece)
                progress.see(piece)
            f.flush()
            os.fsync(f.fileno())
    progress.end()
    os.replace(partial, target)
    return target


def import_collection(url: str, key: str, path: Path, collection: str | None, *, quiet: bool = False) -> dict:  # type: ignore[type-arg]
    """Upload an export file into ``collection`` (default: the name in its header); the API's answer."""
    name = collection or read_header(path)["collection"]
    progress = Progress(f"importing into {name!r}", quiet=quiet)

    def pieces() -> Iterator[bytes]:
        with open(path, "rb") as f:
            while piece := f.read(PIECE):
                progress.see(piece)
                yield piece

    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/gzip"}
    with httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT) as http:
        response = http.post(f"/v1/collections/{name}/import", content=pieces())
    progress.end()
    if response.status_code != 200:
        raise _refusal(response)
    return response.json()  # type: ignore[no-any-return]


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
