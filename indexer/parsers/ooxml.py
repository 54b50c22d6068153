"""Checks on an Office Open XML package (.docx, .pptx, .xlsx: a zip of XML parts) before any library opens it.

- Encrypted files are not zips at all but OLE compound files holding an ``EncryptedPackage`` stream;
  legacy binary files (.doc, .ppt, .xls) are OLE files too. Both are refused by name.
- Zip bombs: the declared uncompressed sizes are summed and capped (:data:`MAX_UNPACKED_BYTES`), and so is
  each large part's compression ratio (:data:`MAX_RATIO`) and the number of parts. The declared sizes bind:
  Python's ``zipfile``, which python-docx, python-pptx and openpyxl all read through, never yields more than
  a part's declared size (a part that inflates to more fails its CRC check).
- XML bombs (billion laughs, external entities): OOXML parts never carry a DTD, so any part with one is
  refused. defusedxml reads each part's prologue up to its first element, where a DTD would have to be.
"""

from __future__ import annotations

import io
import zipfile

from indexer.parsers.errors import ParseError

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
ENCRYPTED_STREAM = "EncryptedPackage".encode("utf-16-le")
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
MAX_RATIO = 100
"""Largest compression ratio of a part over :data:`RATIO_FLOOR` bytes (deflated XML is rarely over 20)."""
RATIO_FLOOR = 1024 * 1024
MAX_PARTS = 10_000
XML_SUFFIXES = (".xml", ".rels", ".vml")


def check_package(data: bytes, kind: str) -> None:
    """Raise :class:`ParseError` unless ``data`` is a zip that is safe to hand to the ``kind`` library."""

    if data.startswith(OLE_MAGIC):
        if ENCRYPTED_STREAM in data:
            raise ParseError(f"{kind} file is encrypted (password-protected): save it without a password to index it")
        raise ParseError(f"not a {kind} file: this is a legacy binary Office file (.doc/.ppt/.xls); "
                         f"save it as .{kind}")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ParseError(f"not a valid {kind} file (corrupt or truncated zip: {exc})") from exc
    with archive:
        parts = archive.infolist()
        if len(parts) > MAX_PARTS:
            raise ParseError(f"{kind} refused: {len(parts)} parts in the package (the limit is {MAX_PARTS})")
        total = sum(p.file_size for p in parts)
        if total > MAX_UNPACKED_BYTES:
            raise ParseError(f"{kind} refused as a zip bomb: it unpacks to {total} bytes "
                             f"(the limit is {MAX_UNPACKED_BYTES})")
        for part in parts:
            if part.file_size > RATIO_FLOOR and part.file_size > MAX_RATIO * max(part.compress_size, 1):
                raise ParseError(f"{kind} refused as a zip bomb: part {part.filename!r} inflates "
                                 f"{part.file_size // max(part.compress_size, 1)}x (the limit is {MAX_RATIO}x)")
        for part in parts:
            if part.filename.lower().endswith(XML_SUFFIXES):
                _check_prologue(archive, part, kind)


def _check_prologue(archive: zipfile.ZipFile, part: zipfile.ZipInfo, kind: str) -> None:
    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import iterparse

    try:
        with archive.open(part) as stream:
            for _event, _element in iterparse(stream, events=("start",), forbid_dtd=True):
                return  # the first element: no DTD can follow
    except DefusedXmlException as exc:
        raise ParseError(f"{kind} refused: part {part.filename!r} declares a DTD or entities "
                         f"(an XML bomb or external entity): {type(exc).__name__}") from exc
    except Exception as exc:  # noqa: BLE001 - malformed XML or a bad CRC: the library would fail on it too
        raise ParseError(f"not a valid {kind} file: part {part.filename!r}: {type(exc).__name__}: {exc}") from exc
