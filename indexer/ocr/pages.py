"""What a worker process does with one page: render a PDF page (pypdfium2) or decode an image frame (Pillow),
make it grey, and read it with the engine. Module-level functions: they are sent to the worker by reference.

Files come by path (the reader spools a file once; each worker opens it and keeps the last one open), never as
bytes per page. Pixels are bounded twice: a frame's declared size is checked before it is decoded, and a PDF
page is rendered at the configured dpi unless that would pass ``max_pixels``, in which case at the dpi that fits.
"""

from __future__ import annotations

import io
import math
from typing import Any

from PIL import Image, ImageOps

from indexer.ocr.errors import OcrFailed
from indexer.ocr.tesseract import Tesseract
from service.media.raster import flatten, open_raster

_open_pdf: tuple[str, Any] | None = None
"""(path, PdfDocument) last opened by this worker: the pages of one file come one after another."""
MIN_DPI, MAX_DPI = 70, 1200
"""A resolution an image declares outside this range is ignored (some say 1). An image that declares none is
read at the configured dpi: left to guess, Tesseract assumes 70 and drops a ruled table's columns but the first
(the table fixture's CER is 58 % so, 1.7 % at 96 dpi or more)."""


def render_pdf_page(path: str, index: int, dpi: int, max_pixels: int) -> tuple[Image.Image, int]:
    """Page ``index`` (0-based) in greyscale, and the dpi it was rendered at."""
    import pypdfium2 as pdfium

    global _open_pdf
    if _open_pdf is None or _open_pdf[0] != path:
        if _open_pdf is not None:
            _open_pdf[1].close()
            _open_pdf = None
        _open_pdf = (path, pdfium.PdfDocument(path))
    page = _open_pdf[1][index]
    try:
        width_pt, height_pt = page.get_size()
        scale = dpi / 72
        if width_pt * height_pt * scale * scale > max_pixels:
            scale = math.sqrt(max_pixels / (width_pt * height_pt))  # a huge page: fewer dots per inch, same pixels
        bitmap = page.render(scale=scale, grayscale=True)
        image = bitmap.to_pil().convert("L")
    finally:
        page.close()
    return image, max(round(scale * 72), 1)


def decode_frame(path: str, fmt: str, frame: int, max_pixels: int) -> tuple[Image.Image, int | None]:
    """Frame ``frame`` of an image file in greyscale, EXIF orientation applied, and its dpi when it says one."""
    with open_raster(path, fmt) as image:
        image.seek(frame)
        width, height = image.size
        if width * height > max_pixels:  # checked by the parser too; a frame is checked again where it is decoded
            raise OcrFailed(f"frame {frame + 1} is {width}×{height} pixels; the limit is {max_pixels}")
        image.load()
        upright = ImageOps.exif_transpose(image) if frame == 0 else image
        grey = flatten(upright or image).convert("L")
        dpi = image.info.get("dpi")
    x = float(dpi[0]) if isinstance(dpi, tuple) and dpi else 0.0
    return grey, round(x) if MIN_DPI <= x <= MAX_DPI else None


def pgm(image: Image.Image) -> bytes:
    """The page as Tesseract reads it fastest: uncompressed 8-bit grey (PNG would spend the time compressing)."""
    out = io.BytesIO()
    image.save(out, "PPM")
    return out.getvalue()


def read_pdf_page(path: str, index: int, dpi: int, max_pixels: int, engine: Tesseract) -> str:
    image, rendered_dpi = render_pdf_page(path, index, dpi, max_pixels)
    return engine.read(pgm(image), rendered_dpi)


def read_image_frame(path: str, fmt: str, frame: int, max_pixels: int, default_dpi: int, engine: Tesseract) -> str:
    image, dpi = decode_frame(path, fmt, frame, max_pixels)
    return engine.read(pgm(image), dpi or default_dpi)
