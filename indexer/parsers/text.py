from __future__ import annotations

from indexer.documents import ParsedDocument, Section


def decode(data: bytes) -> str:
    from indexer.parsers import ParseError

    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ParseError(f"not valid UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r})") from exc


def parse(name: str, text: str) -> ParsedDocument:
    return ParsedDocument(doc_id=name, sections=[Section(text, 0)] if text.strip() else [], full_text=text)
