"""``ocr``: an OCR reader on the installed Tesseract, shared by the session (its two workers start once). The
tests need Tesseract and fail, saying how to install it, where it is missing (tests/run.sh installs it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from indexer.ocr.errors import OcrUnavailable
from indexer.ocr.reader import OcrReader
from service.config import OcrSettings

MAX_PIXELS = 40_000_000


@pytest.fixture(scope="session")
def ocr() -> Iterator[OcrReader]:
    reader = OcrReader(OcrSettings(), max_pixels=MAX_PIXELS)
    try:
        reader.require()
    except OcrUnavailable as exc:
        pytest.fail(str(exc))
    yield reader
    reader.close()
