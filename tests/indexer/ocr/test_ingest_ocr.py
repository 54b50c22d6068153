"""Scans through an ingest job (the scripted embedding runner, the store in-process): a folder with an image-only
PDF and a screenshot is indexed, a phrase only in the scan is found by BM25 on its page with ``source: "ocr"``,
re-running the unchanged folder reads no page (OCR calls counted), and a file that turns corrupt is that file's
error while what was stored for it stays as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from indexer.ocr.reader import OcrReader
from service.config import Settings
from tests.support.app import app_client, wait_for_job
from tests.support.ocr_pages import PARAGRAPH, UNIQUE_PHRASE, encoded, image_pdf, text_page, two_columns
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings

FILES = {
    "scan.pdf": image_pdf([text_page(PARAGRAPH[:2]), text_page((UNIQUE_PHRASE,))]),
    "screen.png": encoded(two_columns(), "PNG"),
    "notes.md": b"# Notes\n\nA page typed, not scanned.\n",
}


@pytest.fixture
def pages_read(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every page the OCR reader is asked for, as (kind, page index), across every reader in the process."""
    calls: list[tuple[str, int]] = []
    pdf, image = OcrReader.read_pdf_pages, OcrReader.read_image_frames

    def read_pdf_pages(self: OcrReader, data: bytes, indices: list[int]) -> list[str]:
        calls.extend(("pdf", i) for i in indices)
        return pdf(self, data, indices)

    def read_image_frames(self: OcrReader, data: bytes, fmt: str, frames: int) -> list[str]:
        calls.extend(("image", i) for i in range(frames))
        return image(self, data, fmt, frames)

    monkeypatch.setattr(OcrReader, "read_pdf_pages", read_pdf_pages)
    monkeypatch.setattr(OcrReader, "read_image_frames", read_image_frames)
    return calls


def _settings(tmp_path: Path) -> Settings:
    s = scripted_settings(tmp_path / "data", qdrant={"edge_process": False})
    s.ingest.allowed_roots = [tmp_path]
    s.indexer.poll_s = 0.05  # how often the idle worker looks for the job (a wait, not an assertion)
    return s


async def _ingest(client: httpx.AsyncClient, folder: Path) -> dict[str, Any]:
    r = await client.post("/v1/collections/docs/ingest", json={"source": {"kind": "path", "path": str(folder)}})
    assert r.status_code == 202, r.text
    return await wait_for_job(client, r.json()["id"])


async def _top(client: httpx.AsyncClient, query: str) -> dict[str, Any]:
    r = await client.post("/v1/search", json={"collection": "docs", "query": query, "top_k": 1, "mode": "sparse"})
    assert r.status_code == 200, r.text
    (hit,) = r.json()["hits"]
    return hit  # type: ignore[no-any-return]


async def test_scans_are_indexed_found_on_their_page_and_not_read_twice(
    tmp_path: Path, pages_read: list[tuple[str, int]]
) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
    async with app_client(_settings(tmp_path), transports={"embedding": ScriptedEmbedder().transport},
                          with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "docs"})).status_code == 201
        first = await _ingest(client, folder)
        read_first = sorted(pages_read)
        scan = await _top(client, "lighthouse keeper barometric pressure")
        screen = await _top(client, "copper kettles iron stove")

        pages_read.clear()
        again = await _ingest(client, folder)
        read_again = list(pages_read)

        (folder / "screen.png").write_bytes(FILES["screen.png"][:2000])  # the screenshot is cut short
        broken = await _ingest(client, folder)
        screen_after = await _top(client, "copper kettles iron stove")

    assert first["state"] == "succeeded" and first["errors"] == [], first
    assert first["counts"]["documents_indexed"] == 3
    assert read_first == [("image", 0), ("pdf", 0), ("pdf", 1)]
    assert scan["doc_id"] == "scan.pdf" and scan["text"] == UNIQUE_PHRASE
    start = len("\n".join(PARAGRAPH[:2])) + 1  # page 1's two lines, then the newline between pages
    end = start + len(UNIQUE_PHRASE)
    assert scan["location"] == {"char_start": start, "char_end": end, "byte_start": start, "byte_end": end,
                                "page": 2, "source": "ocr"}
    assert screen["doc_id"] == "screen.png" and screen["location"]["source"] == "ocr"
    assert "page" not in screen["location"]  # a single image has no pages

    assert again["state"] == "succeeded" and again["counts"]["documents_unchanged"] == 3, again
    assert again["counts"]["documents_indexed"] == 0 and read_again == []

    assert broken["state"] == "succeeded", broken  # the other files are unchanged: the job is not a failure
    assert broken["counts"]["files_failed"] == 1 and broken["counts"]["documents_unchanged"] == 2
    assert [e["item"] for e in broken["errors"]] == ["screen.png"]
    assert broken["errors"][0]["error"].startswith("image refused: OCR failed on page 1: OSError: image file is truncated")
    assert screen_after == screen  # what was stored for it is untouched


async def test_a_new_ocr_language_list_reads_the_scans_again(tmp_path: Path,
                                                             pages_read: list[tuple[str, int]]) -> None:
    """The OCR identity is part of a scan's hash: the same bytes read with other settings are read again (and
    the text file beside them is not)."""
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "screen.png").write_bytes(FILES["screen.png"])
    (folder / "notes.md").write_bytes(FILES["notes.md"])
    settings = _settings(tmp_path)
    runner = ScriptedEmbedder()
    async with app_client(settings, transports={"embedding": runner.transport}, with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "docs"})).status_code == 201
        await _ingest(client, folder)
    settings.ocr.languages = ["eng", "osd"]  # osd ships with Debian's tesseract-ocr
    pages_read.clear()
    async with app_client(settings, transports={"embedding": runner.transport}, with_worker=True) as client:
        job = await _ingest(client, folder)
    assert job["state"] == "succeeded" and job["counts"]["documents_unchanged"] == 1, job
    assert pages_read == [("image", 0)]
