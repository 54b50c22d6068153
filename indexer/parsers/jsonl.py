"""One document per line: ``{"_id"|"id", "title"?, "text", "metadata"?}`` (BEIR's corpus.jsonl as it is).

Each record is taken as a passage: it becomes one chunk, cut by the runner at the model's window, the
way BEIR/MTEB embed corpora. A line that is not a valid record is reported with its line number."""

from __future__ import annotations

import json

from indexer.documents import ParsedDocument, Section


def parse(name: str, data: bytes) -> list[ParsedDocument]:
    from indexer.parsers import ParseError
    from indexer.parsers.text import decode

    docs = []
    for number, line in enumerate(decode(data).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            doc_id = str(row.get("_id", row.get("id")))
            if doc_id == "None" or not isinstance(row.get("text"), str):
                raise ValueError("needs '_id' (or 'id') and a string 'text'")
        except (ValueError, AttributeError) as exc:
            raise ParseError(f"line {number}: {exc}") from exc
        title = str(row.get("title") or "").strip()
        text = f"{title} {row['text'].strip()}".strip()
        meta = dict(row.get("metadata") or {})
        if title:
            meta.setdefault("title", title)
        docs.append(ParsedDocument(doc_id=doc_id, sections=[Section(text, 0)] if text else [], metadata=meta,
                                   full_text=text, chunk=False))
    return docs
