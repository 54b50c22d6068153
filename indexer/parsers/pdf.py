"""PDF text layer, page by page (pypdf), and scanned pages read by OCR. Page numbers (1-based) travel with each
section.

A page is scanned, and read by OCR instead (rendered by PDFium, :mod:`indexer.ocr`), when it draws an image
(an image XObject, on the page or in a form it draws) and its text layer has fewer non-space characters than
``RAGSERVE_OCR__MIN_CHARS_PER_SQUARE_INCH`` (1 by default) times its area: under 94 on a US Letter page, none
at all on a scanner's page. A page with a text layer keeps it, so a mixed PDF is read page by page; an OCR'd
page's sections say ``location.source: "ocr"``. Without OCR installed, a scanned page fails its file with how
to install it (never a silent skip). An image on a scanned page that declares more pixels than
``RAGSERVE_MEDIA__MAX_IMAGE_PIXELS`` fails its file before anything is rendered.

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
from indexer.parsers.errors import ParseError

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
            pixels = _scan_pixels(page, text, min_density)
            if pixels is not None:
                scanned.append(index)
                if ocr is not None and pixels > ocr.max_pixels:  # a decompression bomb, refused before rendering
                    raise ParseError(f"pdf refused: page {index + 1} draws an image of {pixels} pixels; the limit "
                                     f"is {ocr.max_pixels} (RAGSERVE_MEDIA__MAX_IMAGE_PIXELS)")
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


def _scan_pixels(page: Any, text: str, min_density: float) -> int | None:
    """The pixels of the largest image a scanned page draws (declared, not decoded); None when the page is not
    scanned: it draws no image, or its text layer holds at least ``min_density`` characters per square inch."""
    width, height = _size(page)
    chars = len("".join(text.split()))
    if chars >= min_density * width * height / POINTS_PER_SQUARE_INCH:
        return None
    return _largest_image(page.get("/Resources"), FORM_DEPTH)


def _largest_image(resources: Any, depth: int) -> int | None:
    """Width × height of the largest image XObject in ``resources``, or in a form XObject's resources ``depth``
    levels down; None when there is none (inline images in the content stream are not looked for: scanners
    write XObjects)."""
    largest: int | None = None
    try:
        xobjects = resources.get_object().get("/XObject") if resources is not None else None
        if xobjects is None:
            return None
        for ref in xobjects.get_object().values():
            xobject = ref.get_object()
            subtype = xobject.get("/Subtype")
            found: int | None = None
            if subtype == "/Image":
                found = max(int(xobject.get("/Width", 0)), 0) * max(int(xobject.get("/Height", 0)), 0)
            elif subtype == "/Form" and depth > 0:
                found = _largest_image(xobject.get("/Resources"), depth - 1)
            if found is not None:
                largest = max(largest or 0, found)
    except (AttributeError, KeyError, TypeError, ValueError):
        return largest  # a malformed resource dictionary draws nothing more we can read
    return largest
