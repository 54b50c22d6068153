"""Files that must fail by themselves, with a reason, before or while OCR reads them: truncated, corrupt,
password-protected, decompression bombs (refused from their declared size, before a pixel is decoded), and any
scanned page or image where Tesseract is not installed (the error says how to install it)."""

from __future__ import annotations

import io

import pytest
from PIL import Image
from pypdf import PdfReader, PdfWriter

from indexer.documents import SourceFile
from indexer.ocr.reader import OcrReader
from indexer.parsers import ParseError, parse
from service.config import OcrSettings
from tests.support.images import bomb_png
from tests.support.ocr_pages import PARAGRAPH, encoded, image_pdf, multipage_tiff, text_page
from tests.support.pdf import image_bomb_pdf


def _encrypted(pdf: bytes, user_password: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password, "owner")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _big_tiff_page() -> bytes:
    """Two pages, the second 8000 × 6000 = 48 million pixels (1-bit: 6 MB), over the 40 million cap."""
    out = io.BytesIO()
    Image.new("1", (100, 100), 1).save(out, "TIFF", save_all=True, append_images=[Image.new("1", (8000, 6000), 1)],
                                       compression="tiff_deflate")
    return out.getvalue()


PAGE = text_page(PARAGRAPH[:1])
PNG = encoded(PAGE, "PNG")
PDF = image_pdf([PAGE])
TIFF = multipage_tiff([PAGE, PAGE])
REFUSED = {
    "truncated.png": (PNG[: len(PNG) // 2], "image refused: OCR failed on page 1: OSError: image file is truncated"),
    "truncated.tiff": (TIFF[: len(TIFF) // 2], "the TIFF image could not be read"),
    "bomb.png": (bomb_png(), "image refused: page 1 is 20000×20000 = 400000000 pixels; the limit is 40000000 "
                             "(RAGSERVE_MEDIA__MAX_IMAGE_PIXELS)"),
    "bomb.tiff": (_big_tiff_page(), "image refused: page 2 is 8000×6000 = 48000000 pixels; the limit is 40000000"),
    "truncated.pdf": (PDF[: len(PDF) // 2], "cannot parse pdf: PdfStreamError"),
    "bomb.pdf": (image_bomb_pdf(), "pdf refused: page 1 draws an image of 900000000 pixels; the limit is 40000000"),
    "locked.pdf": (_encrypted(PDF, "secret"), "pdf file is encrypted (password-protected)"),
    "renamed.png": (b"%!PS-Adobe-3.0 EPSF-3.0\nshowpage\n", "not an image ragserve reads: EPS/PostScript"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_hostile_file_is_refused_by_itself(ocr: OcrReader, name: str) -> None:
    data, reason = REFUSED[name]
    with pytest.raises(ParseError) as refused:
        parse(SourceFile(name, data), ocr)
    assert str(refused.value).startswith(reason), str(refused.value)


def test_a_pdf_with_an_empty_user_password_is_read(ocr: OcrReader) -> None:
    (doc,) = parse(SourceFile("restricted.pdf", _encrypted(PDF, "")), ocr)
    assert doc.full_text == PARAGRAPH[0]


@pytest.mark.parametrize("name, data, lead", [
    ("scan.png", PNG, "an image's text is read by OCR. "),
    ("scan.pdf", PDF, "pdf page 1 has no text layer and needs OCR. "),
])
def test_without_tesseract_a_scan_says_how_to_install_it(name: str, data: bytes, lead: str) -> None:
    missing = OcrReader(OcrSettings(tesseract_cmd="/nonexistent/tesseract"), max_pixels=40_000_000)
    with pytest.raises(ParseError) as refused:
        parse(SourceFile(name, data), missing)
    assert str(refused.value).startswith(
        lead + "OCR needs Tesseract: run `bash deploy/local/install-ocr.sh` as root (or `apt-get install -y "
        "tesseract-ocr tesseract-ocr-eng`); without root, see docs/ocr.md (RAGSERVE_OCR__TESSERACT_CMD)")


def test_a_missing_language_pack_is_named() -> None:
    reader = OcrReader(OcrSettings(languages=["eng", "zzz"]), max_pixels=40_000_000)
    with pytest.raises(ParseError, match="Tesseract has no language pack for zzz: .*tesseract-ocr-zzz"):
        parse(SourceFile("scan.png", PNG), reader)
