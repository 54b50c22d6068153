"""A phrase only in a scan is found on its page in every retrieval mode (the live MiniLM runner, the store
in-process): dense, sparse (BM25) and hybrid each put the scanned PDF's page 2 first, its location saying the text
was read by OCR. tests/indexer/ocr/test_ingest_ocr.py makes the BM25 claim with the scripted runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config import Settings
from tests.support.app import app_client, wait_for_job
from tests.support.ocr_pages import PARAGRAPH, UNIQUE_PHRASE, encoded, image_pdf, table, text_page, two_columns


@pytest.fixture
def settings(minilm_settings: Settings, tmp_path: Path) -> Settings:
    minilm_settings.ingest.allowed_roots = [tmp_path]
    minilm_settings.indexer.poll_s = 0.05
    return minilm_settings


async def test_a_phrase_only_in_a_scan_is_found_on_its_page_in_every_mode(settings: Settings,
                                                                        tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "scan.pdf").write_bytes(image_pdf([text_page(PARAGRAPH), text_page((UNIQUE_PHRASE,))]))
    (folder / "screen.png").write_bytes(encoded(two_columns(), "PNG"))
    (folder / "prices.png").write_bytes(encoded(table(), "PNG"))
    (folder / "notes.md").write_bytes(b"# Weather\n\nThe forecast calls for rain over the harbor tomorrow.\n")
    async with app_client(settings, with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "docs"})).status_code == 201
        r = await client.post("/v1/collections/docs/ingest", json={"source": {"kind": "path", "path": str(folder)}})
        job = await wait_for_job(client, r.json()["id"])
        hits = {}
        for mode in ("dense", "sparse", "hybrid"):
            r = await client.post("/v1/search", json={"collection": "docs", "query": "who logs barometric pressure "
                                                      "at dawn?", "top_k": 1, "mode": mode})
            assert r.status_code == 200, r.text
            hits[mode] = r.json()["hits"][0]
    assert job["state"] == "succeeded" and job["counts"]["documents_indexed"] == 4, job
    for mode, hit in hits.items():
        assert (mode, hit["doc_id"], hit["text"]) == (mode, "scan.pdf", UNIQUE_PHRASE)
        assert hit["location"]["page"] == 2 and hit["location"]["source"] == "ocr", (mode, hit["location"])
