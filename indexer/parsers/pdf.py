"""PDF text layer, page by page (pypdf). Page numbers (1-based) travel with each section.

Hostile files are refused per file, with a reason:

- encrypted: a PDF that opens only with a password (one with an empty user password is read);
- decompression bombs: pypdf stops any stream that inflates past its limit (75 MB);
- reference bombs: a small file can make text extraction run for hours (a form XObject holding thousands
  of operators, drawn thousands of times per page, or one content stream shared by every page). Extraction
  counts the content operators it runs, XObjects included, and stops past :data:`MAX_OPERATORS`.
"""

from __future__ import annotations

import io
from typing import Any

from indexer.documents import ParsedDocument, Section

MAX_OPERATORS = 5_000_000
"""Content operators one file may run; a text-heavy page runs a few thousand."""
MAX_PAGES = 20_000


class _OperatorBudget(Exception):
    pass


def parse(name: str, data: bytes) -> ParsedDocument:
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError

    from indexer.parsers import ParseError

    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted and not _decrypts(reader):
        raise ParseError("pdf file is encrypted (password-protected): save it without a password to index it")
    try:
        pages = reader.pages
        if len(pages) > MAX_PAGES:
            raise ParseError(f"pdf refused: {len(pages)} pages (the limit is {MAX_PAGES})")
        operators = 0

        def count(*_args: Any) -> None:
            nonlocal operators
            operators += 1
            if operators > MAX_OPERATORS:
                raise _OperatorBudget

        sections: list[Section] = []
        parts: list[str] = []
        offset = 0
        for number, page in enumerate(pages, start=1):
            text = page.extract_text(visitor_operand_before=count) or ""
            if text.strip():
                sections.append(Section(text, offset, page=number))
            parts.append(text)
            offset += len(text) + 1  # pages joined by "\n" in full_text
    except _OperatorBudget:
        raise ParseError(f"pdf refused: its pages run more than {MAX_OPERATORS} content operators (a reference "
                         "bomb, or a document to split)") from None
    except LimitReachedError as exc:
        raise ParseError(f"pdf refused as a decompression bomb: {exc}") from exc
    meta: dict[str, object] = {"pages": len(pages)}
    title = reader.metadata.title if reader.metadata else None
    if title:
        meta["title"] = str(title)
    return ParsedDocument(doc_id=name, sections=sections, metadata=meta, full_text="\n".join(parts))


def _decrypts(reader: Any) -> bool:
    """Whether the empty user password opens it (many 'encrypted' PDFs only restrict printing)."""
    try:
        return bool(reader.decrypt(""))
    except Exception:  # noqa: BLE001 - an unsupported algorithm is as closed as a wrong password
        return False
