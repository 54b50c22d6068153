"""One document per line: ``{"_id"|"id", "title"?, "text", "metadata"?}`` (BEIR's corpus.jsonl as it is).

Each record is taken as a passage: it becomes one chunk, cut by the runner at the model's window, the
way BEIR/MTEB embed corpora. A line that is not a valid record is reported with its line number; records
hold to the documents API's rules (service.documents.payload), so a line nested past the store's limit,
with a lone surrogate escape, ``NaN`` or a 100-digit integer fails its file instead of reaching the store."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, overload

from indexer.documents import ParsedDocument, Section
from indexer.parsers.errors import ParseError
from service.documents.payload import id_problem, metadata_problem, unicode_problem


class JsonlDocuments(Sequence[ParsedDocument]):
    """A JSONL file's documents, made one at a time as they are iterated.

    :func:`parse` checks every line first (so a bad line still fails its whole file, before anything is
    indexed) and keeps only the lines; each :class:`ParsedDocument` is built when the pipeline reaches it and
    dropped once its batch is written. Building all of them up front kept every record of a 20,000-line
    corpus alive for the whole job, and each full garbage collection walked them all on the loop's thread
    (pauses the stall test measured)."""

    def __init__(self, lines: list[str]) -> None:
        self._lines = lines

    def __len__(self) -> int:
        return len(self._lines)

    @overload
    def __getitem__(self, index: int) -> ParsedDocument: ...
    @overload
    def __getitem__(self, index: slice) -> list[ParsedDocument]: ...
    def __getitem__(self, index: int | slice) -> ParsedDocument | list[ParsedDocument]:
        if isinstance(index, slice):
            return [_document(_record(line)) for line in self._lines[index]]
        return _document(_record(self._lines[index]))

    def __iter__(self) -> Iterator[ParsedDocument]:
        for line in self._lines:
            yield _document(_record(line))


def parse(name: str, data: bytes) -> JsonlDocuments:
    from indexer.parsers.text import decode

    lines = []
    for number, line in enumerate(decode(data).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            _record(line)  # checked now, built again when iterated: nothing of it is kept
        except (ValueError, AttributeError, RecursionError) as exc:
            raise ParseError(f"line {number}: {exc}") from exc
        lines.append(line)
    return JsonlDocuments(lines)


def _document(row: dict[str, Any]) -> ParsedDocument:
    doc_id = str(row.get("_id", row.get("id")))
    title = str(row.get("title") or "").strip()
    text = f"{title} {row['text'].strip()}".strip()
    meta = dict(row.get("metadata") or {})
    if title:
        meta.setdefault("title", title)
    return ParsedDocument(doc_id=doc_id, sections=[Section(text, 0)] if text else [], metadata=meta,
                          full_text=text, chunk=False)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _record(line: str) -> dict[str, Any]:
    row = json.loads(line, parse_constant=_refuse_constant)
    doc_id = str(row.get("_id", row.get("id")))
    if doc_id == "None" or not isinstance(row.get("text"), str):
        raise ValueError("needs '_id' (or 'id') and a string 'text'")
    if (why := id_problem(doc_id)) is not None or not doc_id:
        raise ValueError(f"id {doc_id!r} {why or 'is empty'}")
    metadata = row.get("metadata") or {}
    if (why := metadata_problem(metadata)) is not None:
        raise ValueError(why)
    for key in ("text", "title"):
        value = row.get(key)
        if isinstance(value, str) and (why := unicode_problem(value)) is not None:
            raise ValueError(f"{key} {why}")
    return row  # type: ignore[no-any-return]
