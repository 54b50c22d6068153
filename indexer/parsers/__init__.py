"""Parsers: bytes of one file → documents. The format is chosen by magic bytes first, then extension.

| format | library | why |
|---|---|---|
| text | stdlib | strict UTF-8 (BOM allowed); invalid bytes are a per-file error, never silently replaced |
| code, config, logs | stdlib | plain text, by extension (:data:`TEXT_EXTENSIONS`) or name (``Dockerfile``) |
| Markdown | markdown-it-py | CommonMark parser: headings found by the parser, so '#' inside code is not a heading |
| reStructuredText | docutils | the reference parser: title levels follow the document's adornments; no file insertion |
| HTML | trafilatura | maintained main-content extractor: drops navigation, footers, boilerplate; keeps headings |
| PDF | pypdf | pure-Python, maintained, reads the text layer page by page (page numbers kept) |
| scanned PDF page | pypdfium2, Tesseract | rendered by PDFium, read by OCR (:mod:`indexer.ocr`, docs/ocr.md) |
| images | Pillow, Tesseract | PNG, JPEG, WebP, GIF (first frame), TIFF (every page), told by their bytes; text by OCR |
| Word | python-docx | paragraphs, heading styles and tables in order; pages from Word's recorded page breaks |
| PowerPoint | python-pptx | one section per slide under its title (``slide``), notes included |
| Excel | openpyxl | read-only, cached values; whole rows under the header per chunk (``sheet``, ``rows``) |
| CSV/TSV | stdlib | whole records under the header per chunk (``rows``) |
| JSONL | stdlib | one document per line (`_id`/`id`, `title`, `text`, `metadata`): BEIR corpora load as they are |

Office files are checked before the library sees them (:mod:`indexer.parsers.ooxml`): encrypted files,
zip bombs and XML with a DTD are refused per file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath

from indexer.documents import ParsedDocument, SourceFile
from indexer.ocr.reader import OcrReader
from indexer.parsers import csv, docx, html, image, jsonl, markdown, pdf, pptx, rst, text, xlsx
from indexer.parsers.errors import ParseError
from indexer.parsers.ooxml import OLE_MAGIC

TEXT_EXTENSIONS = frozenset("""
    .txt .text .log .out .diff .patch .adoc .asciidoc .org .tex .bib .srt .vtt
    .py .pyi .pyx .js .mjs .cjs .jsx .ts .tsx .mts .cts .vue .svelte .go .rs .java .kt .kts .scala .groovy
    .gradle .c .h .cc .cpp .cxx .hh .hpp .hxx .cs .fs .m .mm .swift .rb .php .pl .pm .lua .r .jl .dart .ex .exs
    .erl .hs .ml .mli .clj .elm .zig .nim .sql .sh .bash .zsh .fish .ps1 .psm1 .bat .cmd .awk .sed .vim .el
    .css .scss .sass .less .proto .graphql .gql .tf .hcl .nix .cmake .mk .dockerfile
    .jinja .jinja2 .j2 .tmpl .tpl .mustache .hbs .ejs .erb .liquid
    .json .json5 .jsonc .yaml .yml .toml .ini .cfg .conf .properties .xml .xsd .plist .example .sample .dist .in
""".split())
TEXT_NAMES = frozenset({"dockerfile", "containerfile", "makefile", "gnumakefile", "justfile", "procfile",
                        "gemfile", "rakefile", "vagrantfile", "license", "licence", "copying", "notice",
                        "authors", "contributors", "readme", "changelog", "changes", "todo", "codeowners"})
FORMATS = {
    ".md": "markdown", ".markdown": "markdown", ".rst": "rst", ".rest": "rst", ".html": "html", ".htm": "html",
    ".pdf": "pdf", ".jsonl": "jsonl", ".ndjson": "jsonl", ".docx": "docx", ".pptx": "pptx", ".xlsx": "xlsx",
    ".csv": "csv", ".tsv": "tsv", **dict.fromkeys(TEXT_EXTENSIONS, "text"),
    **dict.fromkeys((".png", ".jpg", ".jpeg", ".jpe", ".webp", ".gif", ".tif", ".tiff"), "image"),
}
LEGACY = {".doc": "docx", ".ppt": "pptx", ".xls": "xlsx"}
CONTENT_TYPES = {
    "text/plain": "text", "text/markdown": "markdown", "text/x-rst": "rst", "text/html": "html",
    "application/pdf": "pdf", "application/x-ndjson": "jsonl", "application/jsonl": "jsonl", "text/csv": "csv",
    "text/tab-separated-values": "tsv",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    **dict.fromkeys(("image/png", "image/jpeg", "image/webp", "image/gif", "image/tiff"), "image"),
}
BINARY = {"pdf", "docx", "pptx", "xlsx"}
OCR_FORMATS = frozenset({"pdf", "image"})
"""Formats whose text may come from OCR: their change hash is the file's bytes with the OCR identity
(:mod:`indexer.pipeline`), decided before parsing."""


def detect_format(file: SourceFile) -> str:
    head = file.data[:1024].lstrip()
    if file.data.startswith(b"%PDF-"):
        return "pdf"
    if image.is_image(file.data):
        return "image"
    path = PurePosixPath(file.name.split("?")[0])
    ext = path.suffix.lower()
    if ext in FORMATS:
        return FORMATS[ext]
    if ext in LEGACY:
        raise ParseError(f"unsupported file type {ext!r}: a legacy binary Office format; save it as .{LEGACY[ext]}")
    if not ext and path.name.lower() in TEXT_NAMES or path.name.lower().startswith("dockerfile."):
        return "text"
    if file.content_type:
        ctype = file.content_type.split(";")[0].strip().lower()
        if ctype in CONTENT_TYPES:
            return CONTENT_TYPES[ctype]
    if head[:15].lower().startswith((b"<!doctype html", b"<html")):
        return "html"
    if file.data.startswith(OLE_MAGIC):
        raise ParseError("unsupported file type: an encrypted or legacy binary Office file")
    raise ParseError(f"unsupported file type {ext or file.content_type or 'unknown'!r}")


def parse(file: SourceFile, ocr: OcrReader | None = None) -> Sequence[ParsedDocument]:
    """The file's documents: a list, or for JSONL a sequence that builds each one as it is iterated. Without
    ``ocr``, an image or a scanned PDF page is a :class:`ParseError`."""
    fmt = detect_format(file)
    try:
        if fmt == "pdf":
            return [pdf.parse(file.name, file.data, ocr)]
        if fmt == "image":
            return [image.parse(file.name, file.data, ocr)]
        if fmt in BINARY:
            module = {"docx": docx, "pptx": pptx, "xlsx": xlsx}[fmt]
            return [module.parse(file.name, file.data)]
        if fmt == "jsonl":
            return jsonl.parse(file.name, file.data)
        decoded = text.decode(file.data)
        if fmt == "markdown":
            return [markdown.parse(file.name, decoded)]
        if fmt == "rst":
            return [rst.parse(file.name, decoded)]
        if fmt == "html":
            return [html.parse(file.name, decoded)]
        if fmt in ("csv", "tsv"):
            return [csv.parse(file.name, decoded, delimiter="\t" if fmt == "tsv" else None)]
        return [text.parse(file.name, decoded)]
    except ParseError:
        raise
    except Exception as exc:  # a broken file of any kind is that file's error, not the job's
        raise ParseError(f"cannot parse {fmt}: {type(exc).__name__}: {exc}") from exc
