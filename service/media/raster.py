"""Open a raster image with its own format's Pillow decoder only, and make decoded pixels plain.

:func:`open_raster` never lets Pillow guess: the format was sniffed from the bytes (:mod:`service.media.formats`),
and only that plugin parses the header, so a file that claims to be one format never reaches another plugin.
Opening reads the header alone; no pixel is decoded until the caller loads a frame, after checking its size.
"""

from __future__ import annotations

from typing import IO

from PIL import (
    GifImagePlugin,
    Image,
    ImageFile,
    JpegImagePlugin,
    PngImagePlugin,
    TiffImagePlugin,
    WebPImagePlugin,
)

DECODERS: dict[str, type[ImageFile.ImageFile]] = {
    "PNG": PngImagePlugin.PngImageFile,
    "JPEG": JpegImagePlugin.JpegImageFile,
    "WEBP": WebPImagePlugin.WebPImageFile,
    "GIF": GifImagePlugin.GifImageFile,
    "TIFF": TiffImagePlugin.TiffImageFile,
}


def open_raster(fp: IO[bytes] | str, fmt: str) -> ImageFile.ImageFile:
    """The image's header, read by the decoder of ``fmt`` (a key of :data:`DECODERS`)."""
    return DECODERS[fmt](fp)


def flatten(image: Image.Image) -> Image.Image:
    """RGB, with any transparency composited on white (what a viewer shows)."""
    if image.mode == "RGB":
        return image
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    if image.mode.startswith("I;16") or image.mode in ("I", "F"):
        image = image.point(lambda v: v / 256).convert("L") if image.mode != "F" else image.convert("L")
    return image.convert("RGB")
