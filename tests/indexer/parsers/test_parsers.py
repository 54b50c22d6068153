"""Each format, from small fixture files made here."""

from __future__ import annotations

import json

import pytest

from indexer.documents import SourceFile
from indexer.parsers import ParseError, detect_format, parse
from tests.support.pdf import make_pdf


def _one(name: str, data: bytes):  # type: ignore[no-untyped-def]
    (doc,) = parse(SourceFile(name, data))
    return doc


def test_text_keeps_everything() -> None:
    doc = _one("notes/a.txt", b"hello\nworld\n")
    assert doc.doc_id == "notes/a.txt" and doc.sections[0].text == "hello\nworld\n"


def test_invalid_utf8_is_a_clear_error() -> None:
    with pytest.raises(ParseError, match="not valid UTF-8"):
        parse(SourceFile("bad.txt", b"ok \xff\xfe no"))


def test_markdown_headings_become_paths_and_code_is_not_a_heading() -> None:
    md = "# Guide\nintro\n\n## Install\nrun pip\n\n```\n# not a heading\n```\n\n### GPU\nuse vllm\n\n## Use\ncall it\n"
    doc = _one("g.md", md.encode())
    paths = [(s.headings, s.text.strip()) for s in doc.sections]
    assert paths == [
        (("Guide",), "intro"),
        (("Guide", "Install"), "run pip\n\n```\n# not a heading\n```"),
        (("Guide", "Install", "GPU"), "use vllm"),
        (("Guide", "Use"), "call it"),
    ]
    for s in doc.sections:  # offsets point into the original text
        assert md[s.char_start:s.char_start + len(s.text)] == s.text
    assert doc.metadata["title"] == "Guide"


def test_html_main_text_without_navigation() -> None:
    html = (
        "<html><head><title>Herons</title></head><body><nav><a href='/'>Home</a> | <a href='/x'>Menu item</a></nav>"
        "<article><h1>Grey heron</h1><p>The grey heron is a long-legged wading bird of the family Ardeidae, "
        "native throughout temperate Europe and Asia.</p><h2>Diet</h2><p>It feeds mostly on fish, which it "
        "catches in shallow water with its sharp bill.</p></article>"
        "<footer>Copyright 2024 Example Corp. All rights reserved.</footer></body></html>"
    )
    doc = _one("h.html", html.encode())
    text = doc.full_text
    assert "wading bird" in text and "shallow water" in text
    assert "Menu item" not in text and "Copyright" not in text
    assert any(s.headings[-1:] == ("Diet",) and "fish" in s.text for s in doc.sections)
    assert doc.metadata.get("title") in {"Herons", "Grey heron"}  # trafilatura prefers the article's h1


def test_pdf_text_layer_with_page_numbers() -> None:
    doc = _one("r.pdf", make_pdf(["First page about cats.", "Second page about dogs."]))
    assert [(s.page, s.text.strip()) for s in doc.sections] == [(1, "First page about cats."), (2, "Second page about dogs.")]
    assert doc.metadata["pages"] == 2


def test_corrupt_pdf_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="pdf"):
        parse(SourceFile("broken.pdf", b"%PDF-1.7\n garbage without objects"))


def test_jsonl_beir_rows_are_documents() -> None:
    rows = [{"_id": "4983", "title": "A title", "text": "Body text.", "metadata": {"year": 2001}},
            {"id": "x2", "text": "Second."}]
    docs = parse(SourceFile("corpus.jsonl", "\n".join(json.dumps(r) for r in rows).encode()))
    assert [(d.doc_id, d.full_text, d.chunk) for d in docs] == [("4983", "A title Body text.", False), ("x2", "Second.", False)]
    assert docs[0].metadata == {"year": 2001, "title": "A title"}


def test_jsonl_bad_line_names_the_line() -> None:
    with pytest.raises(ParseError, match="line 2"):
        parse(SourceFile("c.jsonl", b'{"_id": "1", "text": "ok"}\n{"_id": "2"}\n'))


@pytest.mark.parametrize(("name", "data", "fmt"), [
    ("x.bin", b"%PDF-1.4 ...", "pdf"), ("page", b"<!DOCTYPE html><html>", "html"), ("a.MD", b"# x", "markdown"),
])
def test_format_detection(name: str, data: bytes, fmt: str) -> None:
    assert detect_format(SourceFile(name, data)) == fmt


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ParseError, match="^unsupported file type '.bin'$"):
        parse(SourceFile("model.bin", b"\x00\x01\x02...."))


def test_a_file_named_as_an_image_that_is_none_is_refused() -> None:
    """Images are told by their bytes: a .png that is not a PNG (nor any raster) is refused for what it is."""
    with pytest.raises(ParseError, match="^not an image ragserve reads: unknown$"):
        parse(SourceFile("image.png", b"\x89PNG...."))


@pytest.mark.parametrize("name", [
    "app/main.py", "web/index.js", "web/app.ts", "cmd/main.go", "src/lib.rs", "Main.java", "a.c", "a.h", "a.cpp",
    "run.sh", "data.json", "compose.yaml", "k8s.yml", "pyproject.toml", "setup.cfg", "tox.ini", "server.log",
    "templates/page.jinja", "Dockerfile", "Makefile", "LICENSE", "Dockerfile.gpu",
])
def test_code_config_and_logs_are_plain_text(name: str) -> None:
    data = b"key = 1\n# a comment, not a heading\n"
    assert detect_format(SourceFile(name, data)) == "text"
    (doc,) = parse(SourceFile(name, data))
    assert doc.full_text == data.decode() and [s.text for s in doc.sections] == [data.decode()]


@pytest.mark.parametrize(("name", "fmt"), [
    ("a.rst", "rst"), ("a.docx", "docx"), ("a.pptx", "pptx"), ("a.xlsx", "xlsx"), ("a.csv", "csv"), ("a.tsv", "tsv"),
])
def test_office_and_table_formats_by_extension(name: str, fmt: str) -> None:
    assert detect_format(SourceFile(name, b"")) == fmt


def test_this_repository_has_no_unsupported_files() -> None:
    """``ragserve index`` over this source tree: every .py/.jinja/.md/.toml/.yaml/... file has a parser."""
    from pathlib import Path

    from indexer.sources import path_entries
    from indexer.spec import PathSource

    root = Path(__file__).resolve().parents[3]
    unsupported = []
    for path, name in path_entries(PathSource(path=str(root), exclude=["*.egg-info/*", "docs/*.png", "docs/bench/*.png"])):
        try:
            detect_format(SourceFile(name, path.read_bytes()[:2048]))
        except ParseError:
            unsupported.append(name)
    assert unsupported == []
