"""Office, table, reST and source files through an ingest job (live MiniLM runner, embedded store), and the
job's end state when every document fails."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from service.config import Settings
from tests.support.app import app_client, wait_for_job
from tests.support.office import encrypt, make_docx, make_pptx, make_xlsx

MIXED: dict[str, bytes] = {
    "handbook.docx": make_docx(),
    "roadmap.pptx": make_pptx(),
    "sales.xlsx": make_xlsx(),
    "people.csv": b"name,team\nAlice,search\nBob,ingest\n",
    "guide.rst": b"Guide\n=====\n\nKayaks are paddled with a double-bladed paddle.\n",
    "title-only.md": b"# Release notes for the glacier project\n",
    "src/app.py": b"def rotate_keys():\n    '''Rotate the API keys every ninety days.'''\n",
    "deploy/values.yaml": b"replicas: 3\nimage: ragserve:latest\n",
}


@pytest.fixture
def settings(minilm_settings: Settings, tmp_path: Path) -> Settings:
    minilm_settings.ingest.allowed_roots = [tmp_path]
    minilm_settings.indexer.poll_s = 0.05
    return minilm_settings


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


async def _ingest(client: httpx.AsyncClient, folder: Path) -> dict:  # type: ignore[type-arg]
    await client.post("/v1/collections", json={"name": "docs"})
    r = await client.post("/v1/collections/docs/ingest", json={"source": {"kind": "path", "path": str(folder)}})
    assert r.status_code == 202, r.text
    return await wait_for_job(client, r.json()["id"])


async def _top(client: httpx.AsyncClient, query: str, doc_id: str) -> dict:  # type: ignore[type-arg]
    r = await client.post("/v1/search", json={"collection": "docs", "query": query, "top_k": 1,
                                              "filter": {"doc_id": doc_id}})
    assert r.status_code == 200, r.text
    (hit,) = r.json()["hits"]
    return hit  # type: ignore[no-any-return]


async def test_mixed_folder_is_indexed_with_locations(settings: Settings, tmp_path: Path) -> None:
    folder = _write(tmp_path / "mixed", MIXED)
    async with app_client(settings, with_worker=True) as client:
        job = await _ingest(client, folder)
        slide = await _top(client, "hire engineers", "roadmap.pptx")
        rows = await _top(client, "revenue in the south", "sales.xlsx")
        page = await _top(client, "taxis after midnight", "handbook.docx")
        title = await _top(client, "glacier release notes", "title-only.md")
        code = await _top(client, "rotate keys", "src/app.py")
    assert job["state"] == "succeeded", job
    assert job["errors"] == [] and job["counts"]["documents_indexed"] == len(MIXED)
    assert slide["location"]["slide"] == 1 and slide["location"]["headings"] == ["Roadmap 2025"]
    assert rows["location"]["sheet"] == "Sales" and rows["location"]["rows"] == [2, 5]
    assert rows["text"].startswith("Region | Revenue | Closed\n")
    assert page["location"]["page"] == 2 and page["location"]["headings"] == ["Handbook", "Travel"]
    assert title["text"] == "Release notes for the glacier project"
    assert code["text"].startswith("def rotate_keys():")


async def test_every_document_failed_ends_failed(settings: Settings, tmp_path: Path) -> None:
    folder = _write(tmp_path / "bad", {"locked.docx": encrypt(make_docx()), "cut.xlsx": make_xlsx()[:500],
                                       "picture.png": b"\x89PNG\r\n\x1a\n...."})
    async with app_client(settings, with_worker=True) as client:
        job = await _ingest(client, folder)
    assert job["state"] == "failed"
    assert job["message"] == ("every document failed: 3 file(s) could not be read or parsed, "
                              "0 document(s) could not be indexed (see errors)")
    errors = {e["item"]: e["error"] for e in job["errors"]}
    assert errors["locked.docx"].startswith("docx file is encrypted")
    assert errors["cut.xlsx"].startswith("not a valid xlsx file")
    assert errors["picture.png"] == "the PNG image could not be read (SyntaxError: broken PNG file (chunk b''))"


async def test_some_failures_still_succeed_with_errors_listed(settings: Settings, tmp_path: Path) -> None:
    folder = _write(tmp_path / "some", {"ok.md": b"# Fine\nA fine page.\n", "locked.pptx": encrypt(make_pptx())})
    async with app_client(settings, with_worker=True) as client:
        job = await _ingest(client, folder)
    assert job["state"] == "succeeded" and job["message"] is None
    assert job["counts"]["documents_indexed"] == 1 and job["counts"]["files_failed"] == 1
    assert [e["item"] for e in job["errors"]] == ["locked.pptx"]
