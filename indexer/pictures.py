"""The pictures of a file that a describer (:mod:`indexer.vision`) may send to the generator, found without
decoding a pixel.

- an image file: each frame (a TIFF's pages; a GIF's or WebP's first);
- with embedded pictures on: the raster pictures a PDF page draws (its image XObjects, on pages with a text
  layer: a scanned page is a picture of text, which OCR read), a DOCX's pictures in document order, a PPTX's
  pictures slide by slide.

Each is a :class:`PictureRef`: where it is, a key that is the same for a picture used twice (a logo on every
slide is described once), its declared size where the format gives one before decoding, and a ``load`` that
returns encoded bytes for :func:`service.media.images.prepare_image`, which sniffs the format (vector pictures,
EMF/WMF/SVG, are refused there and not described) and checks the byte and pixel caps before it decodes. A TIFF
page and a PDF image are decoded here (the pixel cap checked against their declared size first) and handed on
as PNG.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from indexer.documents import ParsedDocument
from service.media.formats import sniff
from service.media.raster import flatten, open_raster

FORM_DEPTH = 4
"""Form XObjects looked into for pictures, nested this deep (as :mod:`indexer.parsers.pdf` does)."""


class PictureTooLarge(Exception):
    """A picture's declared pixels pass the cap: it is not decoded."""


@dataclass(frozen=True)
class PictureRef:
    key: str
    """Equal for the same picture used twice in one file."""
    location: dict[str, Any]
    """``page`` or ``slide`` where the file has them, and ``picture``: its number in the file (1-based)."""
    load: Callable[[], bytes] = field(repr=False)
    size: tuple[int, int] | None = None
    """Declared width and height, where known without decoding."""


def pictures(fmt: str, data: bytes, doc: ParsedDocument, *, embedded: bool, max_pixels: int,
             max_side: int) -> Iterator[PictureRef]:
    """The pictures of a file of format ``fmt`` (:func:`indexer.parsers.detect_format`), parsed as ``doc``."""
    if fmt == "image":
        yield from _image_frames(data, doc, max_pixels, max_side)
    elif not embedded:
        return
    elif fmt == "pdf":
        yield from _pdf_pictures(data, doc, max_pixels, max_side)
    elif fmt == "docx":
        yield from _docx_pictures(data)
    elif fmt == "pptx":
        yield from _pptx_pictures(data)


def _image_frames(data: bytes, doc: ParsedDocument, max_pixels: int, max_side: int) -> Iterator[PictureRef]:
    fmt = sniff(data)
    regions = doc.images or ()
    if fmt != "TIFF":  # one picture: the file itself (a GIF's or WebP's first frame is what is decoded)
        size = (regions[0].width, regions[0].height) if regions else None
        yield PictureRef("frame 1", {}, lambda: data, size)
        return
    for index, region in enumerate(regions):
        location = {"page": region.page} if region.page is not None else {}
        yield PictureRef(f"frame {index + 1}", location,
                         lambda i=index: _tiff_page(data, i, max_pixels, max_side), (region.width, region.height))


def _tiff_page(data: bytes, index: int, max_pixels: int, max_side: int) -> bytes:
    with open_raster(io.BytesIO(data), "TIFF") as image:
        image.seek(index)
        width, height = image.size
        if width * height > max_pixels:
            raise PictureTooLarge(f"{width}×{height} pixels; the limit is {max_pixels}")
        return _png(image, max_side)


def _png(image: Image.Image, max_side: int) -> bytes:
    """Downsized to fit ``max_side`` (what the generator gets anyway), as PNG."""
    frame = flatten(image)
    frame.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    frame.save(out, "PNG")
    return out.getvalue()


def _pdf_pictures(data: bytes, doc: ParsedDocument, max_pixels: int, max_side: int) -> Iterator[PictureRef]:
    from pypdf import PdfReader

    scanned = {region.page for region in doc.images}
    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted:
        reader.decrypt("")  # the parser already opened it with the empty password, or refused it
    seen: set[str] = set()
    number = 0
    for page_number, page in enumerate(reader.pages, start=1):
        if page_number in scanned:
            continue
        for key, xobject in _image_xobjects(page.get("/Resources"), FORM_DEPTH):
            if key in seen:
                continue
            seen.add(key)
            number += 1
            size = (_int(xobject.get("/Width")), _int(xobject.get("/Height")))
            yield PictureRef(key, {"page": page_number, "picture": number},
                             lambda x=xobject, s=size: _pdf_image(x, s, max_pixels, max_side), size)


def _image_xobjects(resources: Any, depth: int) -> Iterator[tuple[str, Any]]:
    """(key, image XObject) of every image a page's resources draw, forms opened ``depth`` levels down."""
    try:
        xobjects = resources.get_object().get("/XObject") if resources is not None else None
        if xobjects is None:
            return
        for name, ref in xobjects.get_object().items():
            xobject = ref.get_object()
            subtype = xobject.get("/Subtype")
            if subtype == "/Image" and not xobject.get("/ImageMask", False):
                reference = getattr(ref, "idnum", None)
                yield (f"pdf object {reference}" if reference is not None else f"pdf {name} {id(xobject)}"), xobject
            elif subtype == "/Form" and depth > 0:
                yield from _image_xobjects(xobject.get("/Resources"), depth - 1)
    except (AttributeError, KeyError, TypeError, ValueError):
        return  # a malformed resource dictionary: nothing more to read in it


def _pdf_image(xobject: Any, size: tuple[int, int], max_pixels: int, max_side: int) -> bytes:
    width, height = size
    if width * height > max_pixels or width < 1 or height < 1:
        raise PictureTooLarge(f"{width}×{height} pixels; the limit is {max_pixels}")
    image = xobject.decode_as_image()
    if image is None:
        raise ValueError("pypdf could not decode the picture")
    return _png(image, max_side)


def _int(value: Any) -> int:
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return 0


def _docx_pictures(data: bytes) -> Iterator[PictureRef]:
    import docx

    document = docx.Document(io.BytesIO(data))
    parts = document.part.related_parts
    seen: set[str] = set()
    for rid in document.element.body.xpath(".//a:blip/@r:embed"):
        part = parts.get(rid)
        if part is None or str(part.partname) in seen:
            continue
        seen.add(str(part.partname))
        yield PictureRef(str(part.partname), {"picture": len(seen)}, lambda p=part: bytes(p.blob))


def _pptx_pictures(data: bytes) -> Iterator[PictureRef]:
    from pptx import Presentation

    from indexer.parsers.pptx import walk_shapes

    deck = Presentation(io.BytesIO(data))
    seen: set[str] = set()
    for slide_number, slide in enumerate(deck.slides, start=1):
        for shape in walk_shapes(slide.shapes):
            try:
                image = shape.image  # a picture shape (a placeholder holding one too); others have none
            except (AttributeError, ValueError, KeyError, zipfile.BadZipFile):
                continue
            if image.sha1 in seen:
                continue
            seen.add(image.sha1)
            # not image.size: python-pptx reads it with whichever Pillow plugin claims the bytes; the size is
            # read after the sniff, by prepare_image
            yield PictureRef(f"pptx {image.sha1}", {"slide": slide_number, "picture": len(seen)},
                             lambda i=image: bytes(i.blob))
