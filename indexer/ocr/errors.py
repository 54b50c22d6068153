"""Why a page could not be read. Each fails its file (a per-file error of the job), never the job."""

from __future__ import annotations


class OcrError(Exception):
    """A page could not be read by OCR."""


class OcrUnavailable(OcrError):
    """The engine or a configured language is not installed; the message says how to install it."""


class OcrTimeout(OcrError):
    """A page took longer than ``RAGSERVE_OCR__PAGE_TIMEOUT_S``; its worker was killed."""


class OcrFailed(OcrError):
    """The page's worker failed: a corrupt image or page, the memory limit, a crash of the renderer or engine."""
