"""The export file: ``<collection>.ragserve.jsonl.gz``, one gzip member holding JSON Lines (UTF-8, ``\\n``).

Line 1, the header (:class:`ExportHeader`): ``{"format": "ragserve-export", "version": 1, "export_id",
"collection", "model", "dimensions", "distance", "filter_fields", "sparse", "sparse_stats", "quantization",
"points", "exported_at", "ragserve_version", "backend"}``: every setting the collection carries, so that an
import recreates it exactly (``sparse`` is its BM25 analysis settings or null, ``sparse_stats`` its BM25 length
statistics, so BM25 scores come out the same; ``quantization`` is ``"int8"`` or ``"hnsw-int8"`` for a collection
quantized so (``ragserve optimize --int8`` or ``--hnsw-int8``, or the setting at its creation), recorded by an
import where the target records one; ``points`` is the count when the export
began, for progress). A reader takes a header without ``quantization`` (older files) as none.

Then one line per point: its payload fields as the store holds them (``doc_id``, ``chunk_index``, ``text``,
``metadata``, ``content_hash``, ``chunk_count``, and ``source``, ``location``, ``tenant`` where present), its
``id`` in the exported collection, ``"dense"``: base64 of its little-endian float32 vector (as stored: cosine
vectors are normalised), ``"sparse"``: ``{"indices": [...], "values": base64 float32}`` or null.

Last line, the trailer: ``{"end": true, "points": N, "sha256": hex}``, the sha256 of every uncompressed byte
before it. A line that does not parse is refused at once; a stream that ends without its trailer, or whose
count or sha256 does not match, is refused at its end. Why JSON Lines in gzip and not Parquet: no new
dependency (pyarrow is ~100 MB for a one-off transfer), it streams both ways in constant memory, and it is
readable with ``zcat FILE | jq``. Vectors in base64 float32: exact, and a third of their JSON-number size.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from service.sparse.config import SparseConfig, SparseStats
from service.store.types import Chunk, SparseVector, StoredPoint
from service.transfer.errors import ExportCorrupt, ExportTruncated, InvalidExport

FORMAT = "ragserve-export"
VERSION = 1
SUFFIX = ".ragserve.jsonl.gz"
MAX_LINE_BYTES = 64 << 20
"""A longer line is refused (a point is its text, metadata and vectors: kilobytes, at most a few MB)."""
GZIP_LEVEL = 1
"""Base64 of float32 barely compresses; level 1 keeps compression off the export's critical path."""
PAYLOAD_FIELDS = frozenset({"doc_id", "chunk_index", "text", "metadata", "content_hash", "chunk_count", "source",
                            "location", "tenant"})
"""What ``Chunk.payload`` writes: a point with any other payload field could not be stored as it was."""


class ExportHeader(BaseModel):
    """Line 1. Fields a later version 1 writer adds are ignored by this reader."""

    model_config = ConfigDict(extra="ignore")

    format: str
    version: int
    export_id: str = Field(min_length=1, max_length=64)
    collection: str
    model: str
    dimensions: int = Field(gt=0)
    distance: str = "cosine"
    filter_fields: dict[str, str] = Field(default_factory=dict)
    sparse: SparseConfig | None = None
    sparse_stats: SparseStats | None = None
    quantization: str | None = None
    points: int | None = None
    exported_at: str | None = None
    ragserve_version: str | None = None
    backend: str | None = None


@dataclass(frozen=True)
class ImportPoint:
    """A point read back: the chunk (its payload) and its vectors, ready for ``VectorStore.upsert``."""

    id: str
    chunk: Chunk
    dense: np.ndarray
    sparse: SparseVector | None


# --- writing ----------------------------------------------------------------------------------------------

class ExportWriter:
    """Encodes the header, points and trailer into compressed bytes, a piece at a time (constant memory)."""

    def __init__(self, header: ExportHeader, *, level: int = GZIP_LEVEL) -> None:
        self._zip = zlib.compressobj(level, zlib.DEFLATED, 31)  # 31: a gzip member
        self._sha = hashlib.sha256()
        self.points = 0
        self._first = self._line(header.model_dump(mode="json"))

    def header(self) -> bytes:
        return self._first

    def points_bytes(self, points: list[StoredPoint]) -> bytes:
        out = [self._line(encode_point(p)) for p in points]
        self.points += len(points)
        return b"".join(out)

    def trailer(self) -> bytes:
        end = json.dumps({"end": True, "points": self.points, "sha256": self._sha.hexdigest()}).encode() + b"\n"
        return self._zip.compress(end) + self._zip.flush()

    def _line(self, obj: dict[str, Any]) -> bytes:
        raw = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        self._sha.update(raw)
        return self._zip.compress(raw)


def encode_point(p: StoredPoint) -> dict[str, Any]:
    line: dict[str, Any] = {"id": p.id, **p.payload}
    line["dense"] = base64.b64encode(np.asarray(p.dense, dtype="<f4").tobytes()).decode()
    line["sparse"] = None if p.sparse is None else {
        "indices": list(p.sparse.indices),
        "values": base64.b64encode(np.asarray(p.sparse.values, dtype="<f4").tobytes()).decode(),
    }
    return line


# --- reading ----------------------------------------------------------------------------------------------

class ExportReader:
    """Decompresses and parses an export fed to it in arbitrary pieces. :meth:`feed` yields what the piece
    completed (the header first, then :class:`ImportPoint` s); :meth:`finish` checks the end. Errors are
    :class:`InvalidExport` and its subclasses, raised as soon as they can be known."""

    def __init__(self) -> None:
        self._unzip = zlib.decompressobj(31)
        self._sha = hashlib.sha256()
        self._pending = bytearray()
        self.header: ExportHeader | None = None
        self.points = 0
        self.line_no = 0
        self._ended = False

    def feed(self, data: bytes) -> Iterator[ExportHeader | ImportPoint]:
        """The items this piece completes, parsed one by one as the caller takes them (so a header that is
        refused is refused before the lines after it are read); take them all before the next piece."""
        if self._unzip.eof:
            if data:
                raise InvalidExport("data after the end of the gzip stream")
            return iter(())
        try:
            raw = self._unzip.decompress(data, MAX_LINE_BYTES)
            while self._unzip.unconsumed_tail and not self._unzip.eof:
                raw += self._unzip.decompress(self._unzip.unconsumed_tail, MAX_LINE_BYTES)
                if len(raw) > 4 * MAX_LINE_BYTES:  # a decompression bomb's first burst
                    raise InvalidExport("a piece of the stream expands past any line's size")
        except zlib.error as exc:
            raise ExportCorrupt(f"the gzip stream is damaged ({exc})", line=self.line_no + 1) from None
        if self._unzip.unused_data.strip(b"\x00"):
            raise InvalidExport("data after the end of the gzip stream")
        return self._lines(raw)

    def _lines(self, raw: bytes) -> Iterator[ExportHeader | ImportPoint]:
        self._pending += raw
        start = 0
        while (end := self._pending.find(b"\n", start)) != -1:
            line = bytes(self._pending[start:end + 1])
            start = end + 1
            item = self._line(line)
            if item is not None:
                yield item
        del self._pending[:start]
        if len(self._pending) > MAX_LINE_BYTES:
            raise InvalidExport(f"a line longer than {MAX_LINE_BYTES} bytes", line=self.line_no + 1)

    def _line(self, raw: bytes) -> ExportHeader | ImportPoint | None:
        self.line_no += 1
        if self._ended:
            raise InvalidExport("a line after the trailer", line=self.line_no)
        try:
            obj = json.loads(raw)
        except ValueError:
            raise InvalidExport("not JSON", line=self.line_no) from None
        if not isinstance(obj, dict):
            raise InvalidExport("not a JSON object", line=self.line_no)
        if self.header is None:
            self.header = parse_header(obj)
            self._sha.update(raw)
            return self.header
        if obj.get("end") is True:
            self._check_trailer(obj)
            return None
        point = decode_point(obj, self.header, self.line_no)
        self._sha.update(raw)
        self.points += 1
        return point

    def _check_trailer(self, obj: dict[str, Any]) -> None:
        self._ended = True
        if obj.get("points") != self.points:
            raise ExportCorrupt(f"the trailer counts {obj.get('points')!r} points, the file holds {self.points}",
                                line=self.line_no)
        if obj.get("sha256") != self._sha.hexdigest():
            raise ExportCorrupt("the sha256 of the lines does not match the trailer's", line=self.line_no)

    def finish(self) -> int:
        """At the end of the stream: the number of points, once the trailer has checked them."""
        if self.header is None:
            raise ExportTruncated("the stream ends before its header")
        if not self._ended or not self._unzip.eof or self._pending:
            raise ExportTruncated(f"the stream ends after {self.points} points without its trailer")
        return self.points


def parse_header(obj: dict[str, Any]) -> ExportHeader:
    if obj.get("format") != FORMAT:
        raise InvalidExport(f"line 1 is not a {FORMAT} header (format {obj.get('format')!r})")
    if obj.get("version") != VERSION:
        raise InvalidExport(f"version {obj.get('version')!r}; this ragserve reads version {VERSION}")
    try:
        header = ExportHeader.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors(include_input=False, include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidExport(f"header field {where}: {first['msg']}", line=1) from None
    if header.distance != "cosine":
        raise InvalidExport(f"distance {header.distance!r}; ragserve collections use cosine", line=1)
    return header


MAX_NORM_SQUARED = 1.002
"""A stored dense vector is normalised (cosine): its squared length is 1 within float32's rounding, or 0. One
longer than this is a damaged file (a changed byte can make a value 1e30), refused before it is written."""


def decode_point(obj: dict[str, Any], header: ExportHeader, line: int) -> ImportPoint:
    try:
        pid, dense_b64, sparse = obj.pop("id"), obj.pop("dense"), obj.pop("sparse")
        unknown = set(obj) - PAYLOAD_FIELDS
        if unknown:
            raise InvalidExport(f"payload fields ragserve does not store: {sorted(unknown)}", line=line)
        chunk = Chunk(
            doc_id=_typed(obj, "doc_id", str), chunk_index=_typed(obj, "chunk_index", int),
            text=_typed(obj, "text", str), metadata=_typed(obj, "metadata", dict),
            content_hash=_typed(obj, "content_hash", str), chunk_count=_typed(obj, "chunk_count", int),
            source=_optional(obj, "source", str), location=_optional(obj, "location", dict),
            tenant=_optional(obj, "tenant", str),
        )
        dense = _floats(dense_b64, header.dimensions, "dense")
        wide = dense.astype(np.float64)  # float32 squares of a damaged file's 1e30 would overflow
        if float(np.dot(wide, wide)) > MAX_NORM_SQUARED:
            raise ValueError("dense: longer than a unit vector (a stored cosine vector is normalised)")
        vector = None
        if sparse is not None:
            indices = sparse["indices"]
            if not isinstance(indices, list) or not all(type(i) is int and i >= 0 for i in indices):
                raise InvalidExport("sparse indices must be non-negative integers", line=line)
            vector = SparseVector(indices, _floats(sparse["values"], len(indices), "sparse values").tolist())
    except KeyError as exc:
        raise InvalidExport(f"a point without {exc.args[0]!r}", line=line) from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InvalidExport):
            raise
        raise InvalidExport(str(exc), line=line) from None
    if not isinstance(pid, str):
        raise InvalidExport("a point id must be a string", line=line)
    return ImportPoint(pid, chunk, dense, vector)


def _typed(obj: dict[str, Any], key: str, kind: type) -> Any:
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"{key} must be a {kind.__name__}")
    return value


def _optional(obj: dict[str, Any], key: str, kind: type) -> Any:
    return None if obj.get(key) is None else _typed(obj, key, kind)


def _floats(b64: object, count: int, what: str) -> np.ndarray:
    if not isinstance(b64, str):
        raise TypeError(f"{what} must be base64 text")
    try:
        raw = base64.b64decode(b64, validate=True)
    except ValueError:
        raise ValueError(f"{what} is not base64") from None
    if len(raw) != 4 * count:
        raise ValueError(f"{what}: {len(raw) // 4} float32 values, expected {count}")
    values = np.frombuffer(raw, dtype="<f4")
    if not np.isfinite(values).all():
        raise ValueError(f"{what}: values that are not finite")
    return values
