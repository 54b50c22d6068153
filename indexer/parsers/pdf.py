"""PDF text layer, page by page (pypdf), and scanned pages read by OCR. Page numbers (1-based) travel with each
section.

A page is scanned, and read by OCR instead (rendered by PDFium, :mod:`indexer.ocr`), when it draws an image and
its text layer has fewer non-space characters than ``RAGSERVE_OCR__MIN_CHARS_PER_SQUARE_INCH`` (1 by default)
times its area: under 94 on a US Letter page, none at all on a scanner's page. A page with a text layer keeps it,
so a mixed PDF is read page by page; an OCR'd page's sections say ``location.source: "ocr"``. Without OCR
installed, a scanned page fails its file with how to install it (never a silent skip).

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

from indexer.documents import ImageRegion, ParsedDocument, Section
from indexer.ocr.errors import OcrError, OcrUnavailable
from indexer.ocr.reader import OcrReader

MAX_OPERATORS = 5_000_000
"""Content operators one file may run; a text-heavy page runs a few thousand."""
MAX_PAGES = 20_000
POINTS_PER_SQUARE_INCH = 72 * 72
FORM_DEPTH = 4
"""Form XObjects looked into for an image, nested this deep (a scan is an image at the top, or one form down)."""


class _OperatorBudget(Exception):
    pass


def parse(name: str, data: bytes, ocr: OcrReader | None = None) -> ParsedDocument:
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

        texts: list[str] = []
        scanned: list[int] = []
        min_density = ocr.settings.min_chars_per_square_inch if ocr is not None else 1.0
        for index, page in enumerate(pages):
            text = page.extract_text(visitor_operand_before=count) or ""
            texts.append(text)
            if _is_scanned(page, text, min_density):
                scanned.append(index)
    except _OperatorBudget:
        raise ParseError(f"pdf refused: its pages run more than {MAX_OPERATORS} content operators (a reference "
                         "bomb, or a document to split)") from None
    except LimitReachedError as exc:
        raise ParseError(f"pdf refused as a decompression bomb: {exc}") from exc
    if scanned:
        numbers = ", ".join(str(i + 1) for i in scanned[:5]) + (" ..." if len(scanned) > 5 else "")
        if ocr is None:
            raise ParseError(f"page {numbers} has no text layer to read, and this indexer was given no OCR")
        try:
            for index, text in zip(scanned, ocr.read_pdf_pages(data, scanned), strict=True):
                texts[index] = text
        except OcrUnavailable as exc:
            raise ParseError(f"pdf page {numbers} has no text layer and needs OCR. {exc}") from None
        except OcrError as exc:
            raise ParseError(f"pdf refused: OCR failed on {exc}") from None
    sections: list[Section] = []
    offset = 0
    ocr_pages = set(scanned)
    for index, text in enumerate(texts):
        if text.strip():
            location = {"source": "ocr"} if index in ocr_pages else {}
            sections.append(Section(text, offset, page=index + 1, location=location))
        offset += len(text) + 1  # pages joined by "\n" in full_text
    images = tuple(ImageRegion(i + 1, *_size(pages[i])) for i in scanned)
    meta: dict[str, object] = {"pages": len(pages)}
    title = reader.metadata.title if reader.metadata else None
    if title:
        meta["title"] = str(title)
    return ParsedDocument(doc_id=name, sections=sections, metadata=meta, full_text="\n".join(texts), images=images)


def _decrypts(reader: Any) -> bool:
    """Whether the empty user password opens it (many 'encrypted' PDFs only restrict printing)."""
    try:
        return bool(reader.decrypt(""))
    except Exception:  # noqa: BLE001 - an unsupported algorithm is as closed as a wrong password
        return False


def _size(page: Any) -> tuple[int, int]:
    """The page's width and height in points."""
    box = page.mediabox
    return round(abs(float(box.width))), round(abs(float(box.height)))


def _is_scanned(page: Any, text: str, min_density: float) -> bool:
    """The page draws an image and its text layer is sparser than ``min_density`` characters per square inch."""
    width, height = _size(page)
    chars = len("".join(text.split()))
    if chars >= min_density * width * height / POINTS_PER_SQUARE_INCH:
        return False
    return _draws_image(page.get("/Resources"), FORM_DEPTH)


def _draws_image(resources: Any, depth: int) -> bool:
    """An image XObject in ``resources``, or in a form XObject's resources ``depth`` levels down (inline images
    in the content stream are not looked for: scanners write XObjects)."""
    try:
        xobjects = resources.get_object().get("/XObject") if resources is not None else None
        if xobjects is None:
            return False
        for ref in xobjects.get_object().values():
            xobject = ref.get_object()
            subtype = xobject.get("/Subtype")
            if subtype == "/Image":
                return True
            if subtype == "/Form" and depth > 0 and _draws_image(xobject.get("/Resources"), depth - 1):
                return True
    except (AttributeError, KeyError, TypeError, ValueError):
        return False  # a malformed resource dictionary draws nothing we can read
    return False
