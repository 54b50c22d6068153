"""Office files made at test time with the libraries the parsers read them with (no binary fixtures), and
the hostile variants of them: encrypted, truncated, a zip bomb, an XML entity bomb."""

from __future__ import annotations

import datetime as dt
import io
import zipfile


def make_docx() -> bytes:
    import docx
    from docx.enum.text import WD_BREAK

    d = docx.Document()
    d.core_properties.title = "Staff handbook"
    d.add_paragraph("Welcome to the company.")
    d.add_heading("Handbook", 0)
    d.add_heading("Travel", 1)
    d.add_paragraph("Book trains two weeks early.")
    p = d.add_paragraph("Hotels need approval.")
    p.add_run().add_break(WD_BREAK.PAGE)
    p.add_run("Taxis are fine after midnight.")
    table = d.add_table(rows=2, cols=2)
    for (r, c), text in {(0, 0): "City", (0, 1): "Daily budget", (1, 0): "Paris", (1, 1): "200 EUR"}.items():
        table.cell(r, c).text = text
    d.add_heading("Expenses", 2)
    d.add_paragraph("Keep every receipt.")
    return _save(d)


def make_pptx() -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    one = deck.slides.add_slide(deck.slide_layouts[1])  # title and content
    one.shapes.title.text = "Roadmap 2025"
    one.placeholders[1].text = "Ship the API\nHire two engineers"
    one.notes_slide.notes_text_frame.text = "Mention the budget."
    two = deck.slides.add_slide(deck.slide_layouts[6])  # blank: no title
    box = two.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1))
    box.text_frame.text = "Questions welcome"
    table = two.shapes.add_table(2, 2, Inches(1), Inches(3), Inches(4), Inches(1)).table
    for (r, c), text in {(0, 0): "Team", (0, 1): "Size", (1, 0): "Search", (1, 1): "4"}.items():
        table.cell(r, c).text = text
    return _save(deck)


def make_xlsx() -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    sales = book.active
    sales.title = "Sales"
    sales.append(["Region", "Revenue", "Closed"])
    sales.append(["North", 1200.0, dt.datetime(2024, 1, 5)])
    sales.append([])
    sales.append(["South", 0.1 + 0.2, True])
    sales.append(["East", 7, dt.datetime(2024, 2, 1, 9, 30)])
    book.create_sheet("Empty")
    notes = book.create_sheet("Notes")
    notes["B2"] = "Figures are in thousands"
    return _save(book)


def encrypt(data: bytes, password: str = "secret") -> bytes:
    """The file as Office saves it with a password (an OLE container around the encrypted package)."""
    from msoffcrypto.format.ooxml import OOXMLFile

    out = io.BytesIO()
    OOXMLFile(io.BytesIO(data)).encrypt(password, out)
    return out.getvalue()


def replace_part(data: bytes, name: str, content: bytes) -> bytes:
    """The package with part ``name`` replaced (or added)."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename != name:
                dst.writestr(info, src.read(info))
        dst.writestr(name, content)
    return out.getvalue()


def entity_bomb(root: bytes) -> bytes:
    """Billion laughs in front of ``root``, the part's root element."""
    entities = b'<!ENTITY lol0 "lol">' + b"".join(
        b'<!ENTITY lol%d "%s">' % (i, b"&lol%d;" % (i - 1) * 10) for i in range(1, 10))
    return b'<?xml version="1.0"?>\n<!DOCTYPE lolz [' + entities + b"]>\n" + root.replace(b">", b">&lol9;", 1)


def _save(document: object) -> bytes:
    out = io.BytesIO()
    document.save(out)  # type: ignore[attr-defined]
    return out.getvalue()
