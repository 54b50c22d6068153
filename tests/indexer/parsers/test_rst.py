"""reStructuredText through docutils: heading paths by adornment order, slices of the source, no includes."""

from __future__ import annotations

import pytest

from indexer.documents import SourceFile
from indexer.parsers import ParseError, parse
from tests.indexer.parsers.conftest import Passages

GUIDE = """\
=====
Guide
=====

Intro text.

Install
-------

Run pip.

.. code-block:: python

   # not a heading
   x = 1

On a GPU
~~~~~~~~

Use vLLM.

Use
---

Call it.

.. include:: /etc/hostname
"""


def test_sections_follow_the_adornment_levels(passages: Passages) -> None:
    assert passages("guide.rst", GUIDE.encode()) == [
        ("Intro text.", {"char_start": 19, "char_end": 30, "headings": ["Guide"]}),
        ("Run pip.\n\n.. code-block:: python\n\n   # not a heading\n   x = 1",
         {"char_start": 49, "char_end": 110, "headings": ["Guide", "Install"]}),
        ("Use vLLM.", {"char_start": 131, "char_end": 140, "headings": ["Guide", "Install", "On a GPU"]}),
        ("Call it.\n\n.. include:: /etc/hostname",
         {"char_start": 151, "char_end": 187, "headings": ["Guide", "Use"]}),
    ]


def test_title_metadata_and_no_file_insertion() -> None:
    (doc,) = parse(SourceFile("guide.rst", GUIDE.encode()))
    assert doc.metadata == {"title": "Guide"}
    assert doc.full_text == GUIDE  # the include directive read nothing into the text


def test_only_a_title_indexes_it(passages: Passages) -> None:
    assert passages("t.rst", b"Title\n=====\n") == [("Title", {"char_start": 0, "char_end": 5, "headings": ["Title"]})]


def test_invalid_utf8_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="not valid UTF-8"):
        parse(SourceFile("bad.rst", b"Title\n=====\n\ncaf\xe9\n"))
