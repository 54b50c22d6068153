"""Hostile files made at test time (no binary fixtures): PDFs that are encrypted, malformed, a
decompression bomb or a reference bomb; HTML with entity declarations; deeply nested markup and JSON."""

from __future__ import annotations

import io
import json
import zlib

from tests.support.pdf import make_pdf, pdf_bytes


def _page(contents: int, xobjects: bytes = b"") -> bytes:
    return (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R /Resources << /Font << /F1 3 0 R >>"
            % contents + xobjects + b" >> >>")


FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def pdf_flate_bomb(inflated_bytes: int = 200_000_000) -> bytes:
    """One page whose content stream is ~0.6 MB of Flate that inflates to ``inflated_bytes``."""
    packer = zlib.compressobj(9)
    line = b"BT /F1 12 Tf 72 720 Td (a) Tj ET\n" * 30_000
    parts, written = [], 0
    while written < inflated_bytes:
        parts.append(packer.compress(line))
        written += len(line)
    stream = b"".join(parts) + packer.flush()
    return pdf_bytes([
        b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>", FONT, _page(5),
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ])


def pdf_reference_bomb(operators_per_form: int = 100, draws: int = 1000) -> bytes:
    """One small page that draws one form XObject ``draws`` times; the form holds ``operators_per_form``
    text operators (5 per line), so extracting the page runs their product."""
    form = b"BT /F1 12 Tf 72 720 Td (abc) Tj ET\n" * (operators_per_form // 5)
    page = b"/X Do\n" * draws
    return pdf_bytes([
        b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>", FONT,
        _page(5, b" /XObject << /X 6 0 R >>"),
        b"<< /Length %d >>\nstream\n" % len(page) + page + b"\nendstream",
        b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Length %d >>"
        b"\nstream\n" % len(form) + form + b"\nendstream",
    ])


def pdf_encrypted(user_password: str = "secret") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf(["the secret page"]))))
    writer.encrypt(user_password=user_password, owner_password="owner-" + user_password, algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def html_entity_bomb() -> bytes:
    entities = '<!ENTITY lol0 "lol">' + "".join(
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10))
    return (f'<!DOCTYPE html [{entities}]>\n<html><body><article><p>Hello &lol9; world, a paragraph long '
            "enough for the extractor to keep it.</p></article></body></html>").encode()


def html_external_entity() -> bytes:
    return (b'<!DOCTYPE html [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n<html><body><article><p>Hello &xxe; '
            b"world, a paragraph long enough for the extractor to keep it.</p></article></body></html>")


def nested_json(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def jsonl_record(**fields: object) -> bytes:
    return json.dumps({"id": "r1", "text": "a record", **fields}).encode() + b"\n"
