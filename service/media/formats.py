"""Tell an image's format from its first bytes, never from its name or declared content type.

Only raster formats whose Pillow decoders are plain pixel decoders are opened: PNG, JPEG, WebP, GIF; the
indexer also reads TIFF (scans), :data:`DOCUMENT_RASTER`.
Vector and page-description formats are named when recognised so the refusal says what was sent:
EPS/PostScript (Pillow hands them to Ghostscript, an interpreter), SVG (XML with external references),
WMF/EMF (Windows metafiles, records of drawing calls), PDF.
"""

from __future__ import annotations

import re

RASTER = ("PNG", "JPEG", "WEBP", "GIF")
"""Pillow format names ragserve opens, in the order they are tried (only the sniffed one is tried)."""

DOCUMENT_RASTER = (*RASTER, "TIFF")
"""What the indexer opens as an image document (its text read by OCR): a query image may not be a TIFF."""

_SVG = re.compile(rb"<svg[\s>/]", re.IGNORECASE)


def sniff(data: bytes) -> str:
    """``PNG``, ``JPEG``, ``WEBP``, ``GIF`` or ``TIFF`` for the raster formats; a descriptive name (``SVG``,
    ``EPS/PostScript``, ``WMF``, ``EMF``, ``PDF``) for recognised refused formats; ``unknown`` otherwise."""
    head = data[:64]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "GIF"
    if head.startswith((b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")):  # classic and BigTIFF, either byte order
        return "TIFF"
    if head.startswith((b"%!PS", b"\xc5\xd0\xd3\xc6")):  # PostScript/EPS text, DOS EPS binary header
        return "EPS/PostScript"
    if head.startswith(b"%PDF"):
        return "PDF"
    if head.startswith(b"\xd7\xcd\xc6\x9a") or head[:6] in (b"\x01\x00\x09\x00\x00\x03", b"\x02\x00\x09\x00\x00\x03"):
        return "WMF"
    if head[:4] == b"\x01\x00\x00\x00" and data[40:44] == b" EMF":
        return "EMF"
    text = data[:4096].lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith((b"<?xml", b"<svg", b"<!DOCTYPE svg", b"<!--")) and _SVG.search(data[:65536]):
        return "SVG"
    return "unknown"
