"""What the parsers call to read pages, and the identity that makes a file's change hash independent of OCR
output.

:attr:`OcrReader.identity` names the engine's version, its language data and every setting that changes what
it reads. The indexer hashes a file's bytes with it *before* parsing (:mod:`indexer.pipeline`): an unchanged
file with unchanged OCR is skipped without a page read, and a new engine version or language list reads every
such file again, once.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from indexer.ocr import pages
from indexer.ocr.errors import OcrUnavailable
from indexer.ocr.pool import WorkerPool
from indexer.ocr.tesseract import Tesseract, probe
from service.config import OcrSettings


class OcrReader:
    def __init__(self, settings: OcrSettings, *, max_pixels: int) -> None:
        self.settings = settings
        self.max_pixels = max_pixels
        self.engine = Tesseract(settings.tesseract_cmd, tuple(settings.languages))
        self._pool: WorkerPool | None = None

    @property
    def identity(self) -> str:
        """Engine, version, language data and reading settings; ``... unavailable`` when not installed."""
        s = self.settings
        try:
            installed = probe(self.engine.command, self.engine.languages)
            engine = f"tesseract {installed.version} data {installed.data_digest}"
        except OcrUnavailable:
            engine = "tesseract unavailable"
        return (f"{engine} lang {'+'.join(s.languages)} dpi {s.dpi} min-chars {s.min_chars_per_square_inch:g} "
                f"max-pixels {self.max_pixels}")

    def require(self) -> None:
        """Raise :class:`OcrUnavailable` (with how to install it) unless the engine and its languages are there."""
        probe(self.engine.command, self.engine.languages)

    def read_pdf_pages(self, data: bytes, indices: list[int]) -> list[str]:
        """The text of the PDF's pages ``indices`` (0-based), rendered at the configured dpi."""
        self.require()
        with _spooled(data) as path:
            return _tidy(self.pool.map(pages.read_pdf_page, [
                (path, i, self.settings.dpi, self.max_pixels, self.engine) for i in indices
            ], [f"page {i + 1}" for i in indices]))

    def read_image_frames(self, data: bytes, fmt: str, frames: int) -> list[str]:
        """The text of each of the image's first ``frames`` frames (TIFF pages; one for the other formats)."""
        self.require()
        with _spooled(data) as path:
            return _tidy(self.pool.map(pages.read_image_frame, [
                (path, fmt, f, self.max_pixels, self.settings.dpi, self.engine) for f in range(frames)
            ], [f"page {f + 1}" for f in range(frames)]))

    @property
    def pool(self) -> WorkerPool:
        if self._pool is None:
            s = self.settings
            self._pool = WorkerPool(s.workers, s.worker_memory_mb, s.page_timeout_s)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


@contextmanager
def _spooled(data: bytes) -> Iterator[str]:
    """The file on disk for the workers to open (readable by this user only), removed afterwards."""
    fd, path = tempfile.mkstemp(prefix="ragserve-ocr-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        os.unlink(path)


def _tidy(texts: list[str]) -> list[str]:
    """Each page's text without the engine's page noise: trailing spaces, runs of blank lines, the form feed."""
    out: list[str] = []
    for text in texts:
        lines: list[str] = []
        for line in (line.rstrip() for line in text.replace("\f", "\n").splitlines()):
            if line or (lines and lines[-1]):
                lines.append(line)
        out.append("\n".join(lines).strip())
    return out
