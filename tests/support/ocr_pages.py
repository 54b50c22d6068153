"""Pages for OCR tests, drawn on the spot with Pillow, and the character error rate OCR output is scored by.

Each page knows its own text in reading order (columns left then right, a table row by row, cells separated
by a space), so a test compares what OCR read with what was drawn. Only Pillow and the standard library are
imported here: the engine comparison (``tests/bench/ocr_engines.py``) runs this module from a scratch venv
that holds another engine.

The type is Pillow's own bundled FreeType font (``ImageFont.load_default(size)``, Aileron Regular), so the
pages are the same on every machine with no system font installed; sizes are in points at the page's dpi.
"""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFilter, ImageFont

PARAGRAPH = (
    "The harbor master records the tide height every morning at six.",
    "Ferries to the northern islands leave from pier 14 on weekdays.",
    "A spare anchor chain of 40 meters is stored in the east shed.",
    "Divers must sign the logbook before and after every descent.",
    "Storm warnings are posted on the board beside the fuel dock.",
)
UNIQUE_PHRASE = "The lighthouse keeper logs barometric pressure at dawn."
"""A sentence no other fixture holds: a search for it must find the scanned page it is drawn on."""
LEFT_COLUMN = ("Copper kettles hang above", "the iron stove in the old", "kitchen, and the pantry", "shelves hold jars of plum",
               "jam, pickled onions and", "dried beans for winter.")
RIGHT_COLUMN = ("Seven brass keys open the", "cellar doors below the", "winter garden, where the", "gardener keeps his tools",
                "in a locked cabinet of", "oak beside the boiler.")
TABLE = (("Item", "Qty", "Price"), ("Lantern", "12", "8.50"), ("Rope", "30", "2.75"), ("Compass", "4", "19.90"))


@dataclass(frozen=True)
class Page:
    image: Image.Image
    text: str
    """What is drawn, in reading order, words separated by single spaces."""
    dpi: int


def font(points: float, dpi: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=max(round(points * dpi / 72), 6))


def text_page(lines: tuple[str, ...], *, dpi: int = 300, points: float = 12, width_in: float = 6.5,
              margin_in: float = 0.5) -> Page:
    """Lines of type on a white page, one and a half lines apart."""
    face = font(points, dpi)
    step = round(points * dpi / 72 * 1.5)
    margin = round(margin_in * dpi)
    image = Image.new("L", (round(width_in * dpi), 2 * margin + step * len(lines)), 255)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((margin, margin + i * step), line, fill=0, font=face)
    return Page(image, " ".join(lines), dpi)


def two_columns(*, dpi: int = 300, points: float = 12) -> Page:
    """Two columns side by side: reading order is the whole left column, then the right one."""
    face = font(points, dpi)
    step = round(points * dpi / 72 * 1.5)
    margin, gutter = round(0.5 * dpi), round(3.3 * dpi)  # a column of 2.7 inches, then 0.6 inch of gap
    image = Image.new("L", (round(7 * dpi), 2 * margin + step * len(LEFT_COLUMN)), 255)
    draw = ImageDraw.Draw(image)
    for i, (left, right) in enumerate(zip(LEFT_COLUMN, RIGHT_COLUMN, strict=True)):
        draw.text((margin, margin + i * step), left, fill=0, font=face)
        draw.text((margin + gutter, margin + i * step), right, fill=0, font=face)
    return Page(image, " ".join(LEFT_COLUMN + RIGHT_COLUMN), dpi)


def table(*, dpi: int = 300, points: float = 12) -> Page:
    """A ruled table: reading order is row by row, left to right."""
    face = font(points, dpi)
    row_h, col_w = round(points * dpi / 72 * 2.2), round(1.8 * dpi)
    margin = round(0.5 * dpi)
    cols = len(TABLE[0])
    image = Image.new("L", (2 * margin + cols * col_w, 2 * margin + len(TABLE) * row_h), 255)
    draw = ImageDraw.Draw(image)
    for r, row in enumerate(TABLE):
        for c, cell in enumerate(row):
            x, y = margin + c * col_w, margin + r * row_h
            draw.rectangle((x, y, x + col_w, y + row_h), outline=0, width=max(dpi // 150, 1))
            draw.text((x + dpi // 10, y + row_h // 4), cell, fill=0, font=face)
    return Page(image, " ".join(" ".join(row) for row in TABLE), dpi)


def degrade(page: Page, *, degrees: float = 3.0, blur: float = 0.8, speckles: int = 400, seed: int = 21) -> Page:
    """A poor scan: turned by ``degrees``, blurred, with dark specks scattered over it (seeded)."""
    image = page.image.rotate(degrees, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=255)
    image = image.filter(ImageFilter.GaussianBlur(blur))
    rng = random.Random(seed)
    draw = ImageDraw.Draw(image)
    for _ in range(speckles):
        x, y, r = rng.randrange(image.width), rng.randrange(image.height), rng.choice((1, 1, 2))
        draw.ellipse((x, y, x + r, y + r), fill=rng.randrange(0, 100))
    return Page(image, page.text, page.dpi)


def encoded(page: Page, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    page.image.save(out, fmt, dpi=(page.dpi, page.dpi), **options)
    return out.getvalue()


def jpeg_roundtrip(page: Page, quality: int = 30) -> Page:
    """The page as a JPEG of ``quality`` decodes (block artefacts and ringing around the type)."""
    return Page(Image.open(io.BytesIO(encoded(page, "JPEG", quality=quality))).convert("L"), page.text, page.dpi)


def image_pdf(pages: list[Page]) -> bytes:
    """An image-only PDF (no text layer): each page a picture, as a scanner writes it."""
    out = io.BytesIO()
    images = [p.image.convert("RGB") for p in pages]
    images[0].save(out, "PDF", resolution=float(pages[0].dpi), save_all=True, append_images=images[1:])
    return out.getvalue()


def mixed_pdf(layer_text: str, scanned: Page) -> bytes:
    """A two-page PDF: page 1 with a text layer holding ``layer_text``, page 2 an image of ``scanned`` (no text)."""
    from pypdf import PdfReader, PdfWriter

    from tests.support.pdf import make_pdf

    writer = PdfWriter()
    writer.add_page(PdfReader(io.BytesIO(make_pdf([layer_text]))).pages[0])
    writer.add_page(PdfReader(io.BytesIO(image_pdf([scanned]))).pages[0])
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def multipage_tiff(pages: list[Page]) -> bytes:
    out = io.BytesIO()
    pages[0].image.save(out, "TIFF", save_all=True, append_images=[p.image for p in pages[1:]],
                        compression="tiff_deflate", dpi=(pages[0].dpi, pages[0].dpi))
    return out.getvalue()


CONDITIONS: dict[str, Callable[[], Page]] = {
    "clean 300 dpi": lambda: text_page(PARAGRAPH),
    "150 dpi, 3° skew, blur, speckle": lambda: degrade(text_page(PARAGRAPH, dpi=150)),
    "8-point type": lambda: text_page(PARAGRAPH, points=8),
    "JPEG quality 30": lambda: jpeg_roundtrip(text_page(PARAGRAPH)),
    "two columns": two_columns,
    "table": table,
}
"""One fixture per condition the OCR tests score (tests/indexer/ocr/test_ocr_quality.py, docs/ocr.md)."""


def normalise(text: str) -> str:
    return " ".join(text.split())


def cer(hypothesis: str, reference: str) -> float:
    """Character error rate: edit distance (insertions, deletions, substitutions) over the reference's length,
    both with runs of whitespace made one space; case counts."""
    hyp, ref = normalise(hypothesis), normalise(reference)
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        current = [i]
        for j, h in enumerate(hyp, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1] / max(len(ref), 1)
