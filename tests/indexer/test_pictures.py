"""A PDF's pictures as the describer finds them: on pages with a text layer only (a scanned page is OCR's), found
by their declared size, and a picture that declares more pixels than the cap refused before it is decoded."""

from __future__ import annotations

import zlib

import pytest

from indexer.documents import ImageRegion, ParsedDocument
from indexer.pictures import PictureTooLarge, pictures
from service.media.formats import sniff
from tests.support.pdf import image_bomb_pdf, pdf_bytes

MAX_PIXELS = 40_000_000


def pdf_with_a_figure(side: int = 96) -> bytes:
    """One page: a paragraph of text (a text layer) and an RGB picture drawn under it."""
    pixels = b"".join(bytes((x % 256, y % 256, 128)) for y in range(side) for x in range(side))
    body = zlib.compress(pixels)
    text = "The figure below shows the quarterly results of every region, measured in thousands. " * 3
    content = f"BT /F1 10 Tf 72 720 Td ({text}) Tj ET q 200 0 0 200 72 400 cm /Im0 Do Q".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 6 0 R >> /XObject << /Im0 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB /BitsPerComponent 8 "
        b"/Filter /FlateDecode /Length %d >>\nstream\n" % (side, side, len(body)) + body + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    return pdf_bytes(objects)


def doc(*scanned_pages: int) -> ParsedDocument:
    return ParsedDocument("f.pdf", [], images=tuple(ImageRegion(p, 612, 792) for p in scanned_pages))


def test_a_picture_on_a_page_with_text_is_found_with_its_page_and_size() -> None:
    (ref,) = pictures("pdf", pdf_with_a_figure(), doc(), embedded=True, max_pixels=MAX_PIXELS, max_side=64)
    assert ref.location == {"page": 1, "picture": 1} and ref.size == (96, 96)
    png = ref.load()
    assert sniff(png) == "PNG"


def test_a_scanned_page_and_embedded_pictures_off_give_nothing() -> None:
    data = pdf_with_a_figure()
    assert list(pictures("pdf", data, doc(1), embedded=True, max_pixels=MAX_PIXELS, max_side=64)) == []
    assert list(pictures("pdf", data, doc(), embedded=False, max_pixels=MAX_PIXELS, max_side=64)) == []


def test_a_picture_past_the_pixel_cap_is_refused_before_decoding() -> None:
    (ref,) = pictures("pdf", image_bomb_pdf(30_000), doc(), embedded=True, max_pixels=MAX_PIXELS, max_side=64)
    assert ref.size == (30_000, 30_000)
    with pytest.raises(PictureTooLarge):
        ref.load()
