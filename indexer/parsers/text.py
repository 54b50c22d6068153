from __future__ import annotations

from indexer.documents import ParsedDocument, Section
from indexer.parsers.errors import ParseError


def decode(data: bytes) -> str:
    """Strict UTF-8 (a BOM allowed). NUL bytes mean binary data under a text name (or UTF-16): refused, as
    the documents API refuses NUL in text."""

    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ParseError(f"not valid UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r})") from exc
    if "\x00" in text:
        raise ParseError(f"not text: a NUL byte at byte {data.index(0)} (a binary file, or UTF-16)")
    return text


def parse(name: str, text: str) -> ParsedDocument:
    return ParsedDocument(doc_id=name, sections=[Section(text, 0)] if text.strip() else [], full_text=text)
