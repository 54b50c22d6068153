"""PowerPoint: a section per slide under its title, notes and tables included, ``slide`` in the location."""

from __future__ import annotations

import pytest

from indexer.documents import SourceFile
from indexer.parsers import ParseError, parse
from tests.indexer.parsers.conftest import Passages
from tests.support.office import encrypt, make_pptx


def test_slides_titles_notes_and_tables(passages: Passages) -> None:
    assert passages("deck.pptx", make_pptx()) == [
        ("Ship the API\nHire two engineers\n\nMention the budget.",
         {"char_start": 14, "char_end": 66, "headings": ["Roadmap 2025"], "slide": 1}),
        ("Questions welcome\n\nTeam | Size\nSearch | 4", {"char_start": 68, "char_end": 109, "slide": 2}),
    ]
    (doc,) = parse(SourceFile("deck.pptx", make_pptx()))
    assert doc.metadata == {"slides": 2, "title": "Roadmap 2025"}


def test_title_only_slides_index_their_titles(passages: Passages) -> None:
    import io

    from pptx import Presentation

    deck = Presentation()
    for title in ("Agenda", "Thanks"):
        deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = title  # title only
    out = io.BytesIO()
    deck.save(out)
    assert passages("t.pptx", out.getvalue()) == [
        ("Agenda", {"char_start": 0, "char_end": 6, "headings": ["Agenda"], "slide": 1}),
        ("Thanks", {"char_start": 8, "char_end": 14, "headings": ["Thanks"], "slide": 2}),
    ]


@pytest.mark.parametrize(("mangle", "match"), [
    (encrypt, "pptx file is encrypted"),
    (lambda data: data[: len(data) // 2], "not a valid pptx file"),
])
def test_encrypted_or_corrupt_is_a_parse_error(mangle, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParseError, match=match):
        parse(SourceFile("deck.pptx", mangle(make_pptx())))
