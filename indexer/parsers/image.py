"""Images as documents: PNG, JPEG, WebP, GIF (its first frame) and TIFF (every page), their text read by OCR.

Opened under the guards query images have (:mod:`service.media.images`): the format is sniffed from the bytes
(raster only, whatever the file is called), only that format's decoder reads the header, and every frame's
declared width × height is checked against ``RAGSERVE_MEDIA__MAX_IMAGE_PIXELS`` before a pixel is decoded
(the byte cap is the ingest's ``max_file_bytes``, checked when the file was read). Decoding and OCR happen in
the OCR workers (:mod:`indexer.ocr.pool`).

Each frame with text is a section with ``location.source: "ocr"`` (and ``page`` for a TIFF of several
pages). The document also lists its :class:`~indexer.documents.ImageRegion` s: where a generator is
configured, the describer (:mod:`indexer.vision`) adds what each frame shows to what OCR read.
"""

from __future__ import annotations

import io
import warnings

from indexer.documents import ImageRegion, ParsedDocument, Section
from indexer.ocr.errors import OcrError, OcrUnavailable
from indexer.ocr.reader import OcrReader
from indexer.parsers.errors import ParseError
from service.media.formats import DOCUMENT_RASTER, sniff
from service.media.raster import open_raster

MAX_FRAMES = 2_000
"""TIFF pages one file may have (a scanner's multi-page TIFF is a document of tens)."""
OCR_LOCATION = {"source": "ocr"}


def is_image(data: bytes) -> bool:
    return sniff(data) in DOCUMENT_RASTER


def parse(name: str, data: bytes, ocr: OcrReader | None) -> ParsedDocument:

    fmt = sniff(data)
    if fmt not in DOCUMENT_RASTER:
        raise ParseError(f"not an image ragserve reads: {fmt}")
    sizes = _frame_sizes(data, fmt, ocr.max_pixels if ocr else None)
    if ocr is None:
        raise ParseError("an image's text is read by OCR, which this indexer was not given")
    try:
        texts = ocr.read_image_frames(data, fmt, len(sizes))
    except OcrUnavailable as exc:
        raise ParseError(f"an image's text is read by OCR. {exc}") from None
    except OcrError as exc:
        raise ParseError(f"image refused: OCR failed on {exc}") from None
    many = len(sizes) > 1
    sections: list[Section] = []
    parts: list[str] = []
    offset = 0
    for number, text in enumerate(texts, start=1):
        if text:
            sections.append(Section(text, offset, page=number if many else None, location=OCR_LOCATION))
        parts.append(text)
        offset += len(text) + 1
    regions = tuple(ImageRegion(page=n if many else None, width=w, height=h)
                    for n, (w, h) in enumerate(sizes, start=1))
    meta: dict[str, object] = {"format": fmt.lower()}
    if many:
        meta["pages"] = len(sizes)
    return ParsedDocument(doc_id=name, sections=sections, metadata=meta, full_text="\n".join(parts),
                          images=regions)


def _frame_sizes(data: bytes, fmt: str, max_pixels: int | None) -> list[tuple[int, int]]:
    """Each frame's declared size, from headers only, refused past the pixel cap (GIF and WebP: the first)."""

    sizes: list[tuple[int, int]] = []
    try:
        with warnings.catch_warnings(), open_raster(io.BytesIO(data), fmt) as image:
            warnings.simplefilter("ignore")  # Pillow warns of odd metadata (a short EXIF block): pixels decide
            frames = getattr(image, "n_frames", 1) if fmt == "TIFF" else 1
            if frames > MAX_FRAMES:
                raise ParseError(f"image refused: {frames} pages (the limit is {MAX_FRAMES})")
            for frame in range(frames):
                image.seek(frame)
                width, height = image.size
                if width < 1 or height < 1:
                    raise ParseError(f"image page {frame + 1} has no pixels")
                if max_pixels is not None and width * height > max_pixels:
                    raise ParseError(f"image refused: page {frame + 1} is {width}×{height} = {width * height} "
                                     f"pixels; the limit is {max_pixels} (RAGSERVE_MEDIA__MAX_IMAGE_PIXELS)")
                sizes.append((width, height))
    except ParseError:
        raise
    except Exception as exc:  # noqa: BLE001 - a header Pillow cannot make sense of, whatever it raises
        raise ParseError(f"the {fmt} image could not be read ({type(exc).__name__}: {exc})") from exc
    return sizes

