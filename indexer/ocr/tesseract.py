"""Tesseract through its command line: a page goes in on stdin as an uncompressed PGM, its text comes out on
stdout, in Tesseract's reading order (``--psm 3``: columns found and read one after the other).

The command line, not a binding: Debian's ``tesseract-ocr`` is the maintained build, installed with its language
packs by the system's package manager (deploy/local/install-ocr.sh), with no model downloaded at run time; a
binding (tesserocr) needs a compiler and the library's headers. The process costs a few milliseconds against
the page's hundreds, and runs inside an OCR worker, under that worker's address-space limit (a child inherits
it) and killed with it at the page's timeout.

:func:`probe` runs in the parent: the version and the language data's digest are part of a file's change hash
(:mod:`indexer.ocr.reader`), and a missing executable or language pack is reported with how to install it.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from indexer.ocr.errors import OcrFailed, OcrUnavailable

INSTALL = ("OCR needs Tesseract: run `bash deploy/local/install-ocr.sh` as root (or `apt-get install -y "
           "tesseract-ocr {packs}`); without root, see docs/ocr.md (RAGSERVE_OCR__TESSERACT_CMD)")
PAGE_SEGMENTATION = 3
"""Fully automatic page segmentation: blocks and columns found, read top to bottom, left column first."""
PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Tesseract:
    """How a worker runs the engine (picklable: it travels with each page)."""

    command: str
    languages: tuple[str, ...]

    def read(self, pgm: bytes, dpi: int | None) -> str:
        """The text of one page image (PGM bytes); ``dpi`` when known (Tesseract estimates it otherwise)."""
        args = [self.command, "stdin", "stdout", "-l", "+".join(self.languages), "--psm", str(PAGE_SEGMENTATION)]
        if dpi:
            args += ["--dpi", str(dpi)]
        # one thread per page: the pages run in parallel across workers (RAGSERVE_OCR__WORKERS), and OpenMP's
        # threads would each reserve address space under the worker's limit
        env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
        done = subprocess.run(args, input=pgm, capture_output=True, env=env, check=False)
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
            raise OcrFailed(f"tesseract exited with {done.returncode}: {tail[0]}")
        return done.stdout.decode("utf-8", "replace")


@dataclass(frozen=True)
class Installed:
    version: str
    """``tesseract --version``'s number, e.g. ``5.3.0``."""
    data_digest: str
    """sha256 of the configured languages' ``.traineddata`` files: a new language pack reads differently."""


def install_hint(languages: tuple[str, ...]) -> str:
    return INSTALL.format(packs=" ".join(f"tesseract-ocr-{lang.replace('_', '-').lower()}" for lang in languages))


@lru_cache(maxsize=8)
def probe(command: str, languages: tuple[str, ...]) -> Installed:
    """The installed engine, or :class:`OcrUnavailable` saying what is missing and how to install it (a failure
    is not cached: installing Tesseract while the worker runs is seen at the next file)."""
    try:
        version = _run(command, "--version")
        listing = _run(command, "--list-langs")
    except (OSError, subprocess.SubprocessError) as exc:
        raise OcrUnavailable(f"{install_hint(languages)} ({command!r}: {exc})") from None
    found = re.search(r"tesseract v?(\S+)", version)
    folder = re.search(r'"([^"]+)"', listing)
    available = set(listing.split(":", 1)[-1].split())
    missing = [lang for lang in languages if lang not in available]
    if missing:
        raise OcrUnavailable(f"Tesseract has no language pack for {', '.join(missing)}: "
                             f"{install_hint(tuple(missing))}")
    digest = hashlib.sha256()
    for lang in languages:
        path = Path(folder.group(1) if folder else "") / f"{lang}.traineddata"
        digest.update(lang.encode() + b"\x1f")
        if path.is_file():
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return Installed(found.group(1) if found else version.strip().splitlines()[0], digest.hexdigest()[:16])


def _run(command: str, flag: str) -> str:
    done = subprocess.run([command, flag], capture_output=True, timeout=PROBE_TIMEOUT_S, check=True)
    return (done.stdout + done.stderr).decode("utf-8", "replace")  # older builds print the version on stderr
