"""Pictures described while a folder is indexed, through an ingest job (the app in-process, its worker, the
store in-process, OCR on the installed Tesseract), every runner scripted at the network edge
(``httpx.MockTransport``): the generator's answers are counted and, where a test says so, never come.

- an image's description is a chunk of its own, found by search with ``location.source: "vision"``;
- re-running the unchanged folder makes no call to the generator (counted); a new prompt version describes
  the picture again (the describer's identity is in the file's hash);
- the job's bound: N + 1 pictures, N described, the last named in the job's errors, its file still indexed
  where it has text, and described on the next run;
- a picture whose answer never comes within its deadline is named in the errors; the job goes on;
- embedded pictures (DOCX, PPTX) only when the setting is on, with their slide.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.config import Settings
from tests.support.app import app_client, wait_for_job
from tests.support.images import noise_png
from tests.support.scripted_embed import MINILM_DIMS
from tests.support.scripted_runner import ScriptedRunner, scripted_settings

SUBJECTS = ("lighthouse", "volcano", "glacier", "orchard", "harbor", "canyon")


class Generator:
    """The scripted stack, with the generator's chat answers numbered by picture: the n-th distinct picture is
    described as showing ``SUBJECTS[n]``. ``hang`` makes every chat request wait forever."""

    def __init__(self, *, hang: bool = False) -> None:
        self.runner = ScriptedRunner(dimensions=MINILM_DIMS)
        self.chats: list[dict[str, Any]] = []
        self.pictures: list[str] = []
        self.hang = hang
        self.transport = httpx.MockTransport(self.handle)

    @property
    def transports(self) -> dict[str, httpx.AsyncBaseTransport]:
        return {"embedding": self.transport, "generate": self.transport}

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return await self.runner.handle(request)
        body = json.loads(request.content)
        self.chats.append(body)
        if self.hang:
            await asyncio.Event().wait()
        url = body["messages"][1]["content"][0]["image_url"]["url"]
        if url not in self.pictures:
            self.pictures.append(url)
        subject = SUBJECTS[self.pictures.index(url)]
        return httpx.Response(200, json={
            "id": "c", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": f"A photograph of a {subject}."},
                         "finish_reason": "stop"}],
        })


def _settings(tmp_path: Path, **vision: object) -> Settings:
    s = scripted_settings(tmp_path / "data")
    s.qdrant.edge_process = False
    s.ingest.allowed_roots = [tmp_path]
    s.indexer.poll_s = 0.05  # how often the idle worker looks for the job (a wait, not an assertion)
    for key, value in vision.items():
        setattr(s.vision, key, value)
    return s


def _folder(tmp_path: Path, files: dict[str, bytes]) -> Path:
    folder = tmp_path / "folder"
    folder.mkdir(exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


async def _ingest(client: httpx.AsyncClient, folder: Path) -> dict[str, Any]:
    r = await client.post("/v1/collections/docs/ingest", json={"source": {"kind": "path", "path": str(folder)}})
    assert r.status_code == 202, r.text
    return await wait_for_job(client, r.json()["id"])


async def _hits(client: httpx.AsyncClient, query: str, top_k: int = 1) -> list[dict[str, Any]]:
    r = await client.post("/v1/search", json={"collection": "docs", "query": query, "top_k": top_k,
                                              "mode": "sparse"})
    assert r.status_code == 200, r.text
    return r.json()["hits"]  # type: ignore[no-any-return]


async def test_an_image_is_described_into_a_chunk_of_its_own_and_not_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path, {"chart.png": noise_png(48, 1), "notes.md": b"# Notes\n\nNothing pictured.\n"})
    generator = Generator()
    async with app_client(_settings(tmp_path), transports=generator.transports, with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "docs"})).status_code == 201
        first = await _ingest(client, folder)
        calls_first = len(generator.chats)
        (hit,) = await _hits(client, "lighthouse photograph")
        again = await _ingest(client, folder)
        calls_again = len(generator.chats) - calls_first
        monkeypatch.setattr("service.generation.describe.DESCRIBE_PROMPT_VERSION", 2)
        reworded = await _ingest(client, folder)
        calls_reworded = len(generator.chats) - calls_first

    assert first["state"] == "succeeded" and first["errors"] == [], first
    assert first["counts"]["documents_indexed"] == 2
    assert calls_first == 1
    assert hit["doc_id"] == "chart.png" and hit["text"] == "A photograph of a lighthouse."
    assert hit["location"]["source"] == "vision" and "page" not in hit["location"]  # one image: no pages
    assert again["counts"]["documents_unchanged"] == 2 and again["counts"]["documents_indexed"] == 0, again
    assert calls_again == 0
    assert reworded["counts"]["documents_indexed"] == 1 and reworded["counts"]["documents_unchanged"] == 1
    assert calls_reworded == 1


async def test_past_the_jobs_bound_a_picture_is_reported_and_described_on_the_next_run(tmp_path: Path) -> None:
    files = {f"p{i}.png": noise_png(48, 10 + i) for i in range(3)}
    folder = _folder(tmp_path, {**files, "notes.md": b"# Notes\n\nThree pictures.\n"})
    generator = Generator()
    async with app_client(_settings(tmp_path, max_images_per_job=2), transports=generator.transports,
                          with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "docs"})).status_code == 201
        first = await _ingest(client, folder)
        calls_first = len(generator.chats)
        client.services.settings.vision.max_images_per_job = 10  # type: ignore[attr-defined]
        second = await _ingest(client, folder)
        calls_second = len(generator.chats) - calls_first
        described = await _hits(client, "photograph", top_k=10)

    assert calls_first == 2
    bound = [e for e in first["errors"] if "RAGSERVE_VISION__MAX_IMAGES_PER_JOB" in e["error"]]
    assert len(bound) == 1 and bound[0]["error"].startswith("1 picture(s) not described"), first["errors"]
    left_out = bound[0]["item"]
    # a picture with no text and no description has nothing to index: that document, and only it, failed
    assert first["state"] == "succeeded" and first["counts"]["documents_indexed"] == 3, first
    assert [e for e in first["errors"] if e not in bound] == [{"item": left_out, "error": "no text to index"}]

    assert calls_second == 1  # only the one left out; the two described files are unchanged
    assert second["counts"]["documents_unchanged"] == 3 and second["counts"]["documents_indexed"] == 1, second
    assert second["errors"] == []
    assert sorted(h["doc_id"] for h in described) == sorted(files)
    assert {h["location"]["source"] for h in described} == {"vision"}


async def test_a_picture_not_described_within_its_deadline_is_reported_and_the_job_goes_on(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"slow.png": noise_png(48, 3), "notes.md": b"# Notes\n\nOne picture.\n"})
    generator = Generator(hang=True)
    async with app_client(_settings(tmp_path, timeout_s=0.5), transports=generator.transports,
                          with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "docs"})).status_code == 201
        job = await _ingest(client, folder)

    assert len(generator.chats) == 1
    assert job["state"] == "succeeded" and job["counts"]["documents_indexed"] == 1, job
    (late, empty) = job["errors"]
    assert late["item"] == "slow.png" and late["error"].startswith("picture not described (the image): "), late
    assert "no answer within 0.5s" in late["error"]
    assert empty == {"item": "slow.png", "error": "no text to index"}


def _docx_with_picture(png: bytes) -> bytes:
    import docx

    d = docx.Document()
    d.add_paragraph("The quarterly report.")
    d.add_picture(io.BytesIO(png))
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def _pptx_with_picture(png: bytes) -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    one = deck.slides.add_slide(deck.slide_layouts[6])
    one.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1)).text_frame.text = "Agenda"
    two = deck.slides.add_slide(deck.slide_layouts[6])
    two.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1)).text_frame.text = "Results"
    two.shapes.add_picture(io.BytesIO(png), Inches(1), Inches(2))
    two.shapes.add_picture(io.BytesIO(noise_png(16, 99)), Inches(5), Inches(2))  # an icon: too small to describe
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


async def test_embedded_pictures_are_described_only_when_the_setting_is_on(tmp_path: Path) -> None:
    files = {"report.docx": _docx_with_picture(noise_png(96, 4)), "deck.pptx": _pptx_with_picture(noise_png(96, 5))}
    folder = _folder(tmp_path, files)
    generator = Generator()
    async with app_client(_settings(tmp_path), transports=generator.transports, with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "docs"})).status_code == 201
        off = await _ingest(client, folder)
        calls_off = len(generator.chats)
        client.services.settings.vision.embedded_pictures = True  # type: ignore[attr-defined]
        on = await _ingest(client, folder)
        calls_on = len(generator.chats)
        hits = await _hits(client, "photograph", top_k=10)
        again = await _ingest(client, folder)
        calls_again = len(generator.chats) - calls_on

    assert off["state"] == "succeeded" and off["counts"]["documents_indexed"] == 2 and calls_off == 0, off
    assert on["state"] == "succeeded" and on["errors"] == [] and on["counts"]["documents_indexed"] == 2, on
    assert calls_on == 2  # one picture each; the pptx's icon is under min_side
    by_doc = {h["doc_id"]: h for h in hits}
    assert set(by_doc) == {"report.docx", "deck.pptx"}
    deck = by_doc["deck.pptx"]["location"]
    assert deck["source"] == "vision" and deck["slide"] == 2 and deck["picture"] == 1, deck
    report = by_doc["report.docx"]["location"]
    assert report["source"] == "vision" and report["picture"] == 1, report
    assert again["counts"]["documents_unchanged"] == 2 and calls_again == 0, again


def test_auto_describes_with_a_generator_on_insists_on_one_off_never(tmp_path: Path) -> None:
    from indexer.vision import vision_from_settings
    from service.profiles import get_profile
    from service.upstream.factory import generation_client

    with_generator = _settings(tmp_path)
    generator = generation_client(with_generator, get_profile(with_generator.profile))
    assert generator is not None
    without = Settings(profile="minilm", data_dir=tmp_path)
    assert vision_from_settings(with_generator, generator) is not None
    assert vision_from_settings(without, None) is None
    without.vision.enabled = "on"
    with pytest.raises(ValueError, match="RAGSERVE_VISION__ENABLED=on needs a generator"):
        vision_from_settings(without, None)
    with_generator.vision.enabled = "off"
    assert vision_from_settings(with_generator, generator) is None
