"""Markdown edge cases beyond test_parsers: a page that is only headings still indexes them."""

from __future__ import annotations

from tests.indexer.parsers.conftest import Passages


def test_a_page_that_is_only_a_heading_indexes_the_heading(passages: Passages) -> None:
    assert passages("title.md", b"# Release notes\n") == [
        ("Release notes", {"char_start": 2, "char_end": 15, "headings": ["Release notes"]})]


def test_only_headings_index_each_under_its_path(passages: Passages) -> None:
    assert passages("toc.md", b"# Guide\n\n## Install\n") == [
        ("Guide", {"char_start": 2, "char_end": 7, "headings": ["Guide"]}),
        ("Install", {"char_start": 12, "char_end": 19, "headings": ["Guide", "Install"]}),
    ]


def test_headings_with_bodies_are_not_passages_of_their_own(passages: Passages) -> None:
    assert passages("g.md", b"# Guide\n\n## Empty\n\n## Full\nbody\n") == [
        ("body", {"char_start": 27, "char_end": 31, "headings": ["Guide", "Full"]})]
