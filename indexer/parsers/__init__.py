"""Parsers: bytes of one file → documents. The format is chosen by magic bytes first, then extension.

| format | library | why |
|---|---|---|
| text | stdlib | strict UTF-8 (BOM allowed); invalid bytes are a per-file error, never silently replaced |
| Markdown | markdown-it-py | CommonMark parser: headings found by the parser, so '#' inside code is not a heading |
| HTML | trafilatura | maintained main-content extractor: drops navigation, footers, boilerplate; keeps headings |
| PDF | pypdf | pure-Python, maintained, reads the text layer page by page (page numbers kept) |
| JSONL | stdlib | one document per line (`_id`/`id`, `title`, `text`, `metadata`): BEIR corpora load as they are |
"""

from __future__ import annotations

from pathlib import PurePosixPath

from indexer.documents import ParsedDocument, SourceFile
from indexer.parsers import html, jsonl, markdown, pdf, text


class ParseError(Exception):
    """The file cannot be read as any supported format (reported per file; the job goes on)."""


FORMATS = {
    ".txt": "text", ".text": "text", ".md": "markdown", ".markdown": "markdown", ".html": "html",
    ".htm": "html", ".pdf": "pdf", ".jsonl": "jsonl", ".ndjson": "jsonl",
}
CONTENT_TYPES = {"text/plain": "text", "text/markdown": "markdown", "text/html": "html",
                 "application/pdf": "pdf", "application/x-ndjson": "jsonl", "application/jsonl": "jsonl"}


def detect_format(file: SourceFile) -> str:
    head = file.data[:1024].lstrip()
    if file.data.startswith(b"%PDF-"):
        return "pdf"
    ext = PurePosixPath(file.name.split("?")[0]).suffix.lower()
    if ext in FORMATS:
        return FORMATS[ext]
    if file.content_type:
        ctype = file.content_type.split(";")[0].strip().lower()
        if ctype in CONTENT_TYPES:
            return CONTENT_TYPES[ctype]
    if head[:15].lower().startswith((b"<!doctype html", b"<html")):
        return "html"
    raise ParseError(f"unsupported file type {ext or file.content_type or 'unknown'!r}")


def parse(file: SourceFile) -> list[ParsedDocument]:
    fmt = detect_format(file)
    try:
        if fmt == "pdf":
            return [pdf.parse(file.name, file.data)]
        if fmt == "jsonl":
            return jsonl.parse(file.name, file.data)
        decoded = text.decode(file.data)
        if fmt == "markdown":
            return [markdown.parse(file.name, decoded)]
        if fmt == "html":
            return [html.parse(file.name, decoded)]
        return [text.parse(file.name, decoded)]
    except ParseError:
        raise
    except Exception as exc:  # a broken file of any kind is that file's error, not the job's
        raise ParseError(f"cannot parse {fmt}: {type(exc).__name__}: {exc}") from exc
