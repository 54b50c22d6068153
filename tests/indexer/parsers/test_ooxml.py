"""Hostile Office packages are refused per file before any library opens them."""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable

import pytest

from indexer.documents import SourceFile
from indexer.parsers import ParseError, ooxml, parse
from tests.support.office import entity_bomb, make_docx, make_pptx, make_xlsx, replace_part

KINDS: dict[str, tuple[Callable[[], bytes], str]] = {
    "docx": (make_docx, "word/document.xml"),
    "pptx": (make_pptx, "ppt/presentation.xml"),
    "xlsx": (make_xlsx, "xl/workbook.xml"),
}


def _root(data: bytes, part: str) -> bytes:
    xml = zipfile.ZipFile(io.BytesIO(data)).read(part)
    return re.sub(rb"^<\?xml[^>]*\?>\s*", b"", xml)


@pytest.mark.parametrize("kind", KINDS)
def test_billion_laughs_is_refused(kind: str) -> None:
    make, part = KINDS[kind]
    data = make()
    bomb = replace_part(data, part, entity_bomb(_root(data, part)))
    with pytest.raises(ParseError, match=f"{kind} refused: part '{part}' declares a DTD or entities"):
        parse(SourceFile(f"bomb.{kind}", bomb))


@pytest.mark.parametrize("kind", KINDS)
def test_external_entity_is_refused(kind: str) -> None:
    make, part = KINDS[kind]
    data = make()
    xxe = b'<?xml version="1.0"?>\n<!DOCTYPE x [<!ENTITY xxe SYSTEM "file:///etc/hostname">]>\n' + _root(data, part)
    with pytest.raises(ParseError, match="declares a DTD or entities"):
        parse(SourceFile(f"xxe.{kind}", replace_part(data, part, xxe)))


@pytest.mark.parametrize("kind", KINDS)
def test_zip_bomb_by_ratio_is_refused(kind: str) -> None:
    make, _ = KINDS[kind]
    bomb = replace_part(make(), "customXml/zeros.xml", b"\0" * (20 * 1024 * 1024))  # 20 MB deflates to ~20 KB
    assert len(bomb) < 200_000
    with pytest.raises(ParseError, match=rf"{kind} refused as a zip bomb: part 'customXml/zeros.xml' inflates \d+x"):
        parse(SourceFile(f"bomb.{kind}", bomb))


def test_zip_bomb_by_total_size_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ooxml, "MAX_UNPACKED_BYTES", 10_000)
    with pytest.raises(ParseError, match=r"docx refused as a zip bomb: it unpacks to \d+ bytes \(the limit is 10000\)"):
        parse(SourceFile("big.docx", make_docx()))


def test_too_many_parts_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ooxml, "MAX_PARTS", 5)
    with pytest.raises(ParseError, match="parts in the package"):
        parse(SourceFile("many.pptx", make_pptx()))


def test_legacy_binary_office_files_are_named() -> None:
    ole = ooxml.OLE_MAGIC + b"\x00" * 504
    with pytest.raises(ParseError, match=r"legacy binary Office file \(.doc/.ppt/.xls\); save it as .docx"):
        parse(SourceFile("old.docx", ole))
    with pytest.raises(ParseError, match="legacy binary Office format; save it as .xlsx"):
        parse(SourceFile("old.xls", ole))
