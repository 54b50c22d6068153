"""What the indexer sends the embedding runner, request by request (the scripted runner at the network edge):

- short documents are packed into one request per ``batch_tokens``, never a full request and a lone leftover
  (a batch closed *after* it passed the budget went out as two requests: the budget's worth, then one text);
- a batch whose requests partly failed is tried again with only the texts that got no vectors: a text the
  runner answered is never embedded twice (a worker restarted mid-job showed one document embedded twice);
- JSONL passages (one unsplit chunk each) are packed, and counted in the job, by their whole length, not the
  chunk size; a passage past the runner's window is counted and reported, since the runner embeds it cut.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import httpx
import pytest

from indexer.tokenizer import load_tokenizer, tokenizer_source
from service.config import Settings
from tests.support.app import app_client, wait_for_job
from tests.support.scripted_embed import Arrival, ScriptedEmbedder, scripted_settings

WORDS = ("river lake forest mountain valley desert island ocean meadow canyon glacier volcano harbor bridge "
         "castle garden temple market village city tower station airport library museum theater stadium "
         "hospital school church palace prison factory farm orchard vineyard bakery kitchen cellar attic "
         "balcony chimney corridor courtyard fountain gate hallway lantern mirror pillar quarry ridge shore "
         "summit tunnel whale zebra apple bread candle").split()


def _settings(tmp_path: Path, batch_tokens: int) -> Settings:
    s = scripted_settings(tmp_path / "data")
    s.indexer.batch_tokens = batch_tokens
    s.indexer.inflight_batches = 1  # batches one after another: the requests arrive in the documents' order
    s.indexer.poll_s = 0.05  # how often the idle worker looks for the job (a wait, not an assertion)
    s.ingest.allowed_roots = [tmp_path]
    return s


def _tokens(settings: Settings, text: str) -> int:
    """Counted as the chunker counts (no special tokens)."""
    return len(load_tokenizer(tokenizer_source(settings)).encode(text, add_special_tokens=False).ids)


async def _ingest(client: httpx.AsyncClient, folder: Path, **options: object) -> dict:  # type: ignore[type-arg]
    assert (await client.post("/v1/collections", json={"name": "docs"})).status_code == 201
    r = await client.post("/v1/collections/docs/ingest",
                          json={"source": {"kind": "path", "path": str(folder)}, **options})
    assert r.status_code == 202, r.text
    return await wait_for_job(client, r.json()["id"])


async def test_short_documents_are_packed_one_request_per_budget(tmp_path: Path) -> None:
    texts = [f"a note on the {w} and the {v}" for w, v in zip(WORDS[:12], WORDS[12:24], strict=True)]
    folder = tmp_path / "docs"
    folder.mkdir()
    for i, text in enumerate(texts):
        (folder / f"d{i:02}.txt").write_text(text)
    probe = _settings(tmp_path, 0)
    counts = {_tokens(probe, t) for t in texts}
    assert len(counts) == 1, counts  # the fixture's premise: every note is the same number of tokens
    (each,) = counts
    settings = _settings(tmp_path, 3 * each + 1)  # three notes fit, a fourth would pass the budget
    runner = ScriptedEmbedder()
    async with app_client(settings, transports={"embedding": runner.transport}, with_worker=True) as client:
        job = await _ingest(client, folder)
    assert job["state"] == "succeeded" and job["counts"]["documents_indexed"] == len(texts), job
    assert runner.inputs() == [tuple(texts[i:i + 3]) for i in range(0, len(texts), 3)]


async def test_a_retry_embeds_only_what_got_no_vectors(tmp_path: Path) -> None:
    """One document of six chunks, two chunks per request: the request holding the last words fails once
    (a 503 with no client retry), its siblings succeed; the retry carries exactly the failed request's texts."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "long.txt").write_text(" ".join(WORDS[:60]))
    settings = _settings(tmp_path, 20)
    settings.upstream.retries = 0  # the pipeline's own retry is the one under test
    assert _tokens(settings, " ".join(WORDS[:60])) == 60  # the fixture's premise: one token per word
    failed: list[Arrival] = []

    def script(arrival: Arrival) -> httpx.Response | None:
        if not failed and any(WORDS[59] in t.split() for t in arrival.inputs):
            failed.append(arrival)
            return httpx.Response(503, json={"error": {"message": "scripted failure"}})
        return None

    runner = ScriptedEmbedder(script=script)
    async with app_client(settings, transports={"embedding": runner.transport}, with_worker=True) as client:
        job = await _ingest(client, folder, chunk_tokens=10, chunk_overlap=0)
        points = (await client.get("/v1/collections/docs")).json()["points"]
    assert job["state"] == "succeeded" and job["counts"]["documents_indexed"] == 1, job
    assert job["counts"]["chunks"] == 6 and points == 6
    chunks = [" ".join(WORDS[i:i + 10]) for i in range(0, 60, 10)]
    first, retry = runner.inputs()[:3], runner.inputs()[3:]
    assert sorted(first) == sorted(tuple(chunks[i:i + 2]) for i in range(0, 6, 2))  # three requests, concurrently
    assert retry == [failed[0].inputs] == [tuple(chunks[4:])]
    answered = Counter(t for a in runner.arrivals if a is not failed[0] for t in a.inputs)
    assert answered == Counter(chunks)  # every chunk embedded once


def _passages(folder: Path, texts: list[str]) -> None:
    folder.mkdir()
    lines = [json.dumps({"_id": f"p{i}", "text": t}) for i, t in enumerate(texts)]
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")


async def test_passages_are_packed_and_counted_by_their_whole_length(tmp_path: Path) -> None:
    """Six passages of 30 tokens with 16-token chunks and a budget of two passages: two per request. Counted
    at the chunk size (16 each), three went into each request, and the job reported 96 tokens for 180."""
    texts = [" ".join(WORDS[i:i + 30]) for i in range(6)]
    folder = tmp_path / "docs"
    _passages(folder, texts)
    settings = _settings(tmp_path, 2 * 30 + 1)
    assert [_tokens(settings, t) for t in texts] == [30] * 6  # the fixture's premise: one token per word
    runner = ScriptedEmbedder()
    async with app_client(settings, transports={"embedding": runner.transport}, with_worker=True) as client:
        job = await _ingest(client, folder, chunk_tokens=16)
    assert job["state"] == "succeeded" and job["counts"]["documents_indexed"] == 6, job
    assert runner.inputs() == [tuple(texts[i:i + 2]) for i in range(0, 6, 2)]
    assert job["counts"]["chunks"] == 6 and job["counts"]["tokens"] == 180
    assert job["counts"]["chunks_truncated"] == 0 and job["errors"] == []


async def test_a_passage_past_the_window_is_counted_and_reported(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """MiniLM's window is 256 tokens, 254 of text after [CLS] and [SEP]: a 254-token passage fits, a
    255-token one is embedded cut, and the job says how many were."""
    words = [WORDS[i % len(WORDS)] for i in range(300)]
    texts = [" ".join(words[:254]), " ".join(words[:255]), " ".join(words), "a short passage"]
    folder = tmp_path / "docs"
    _passages(folder, texts)
    settings = _settings(tmp_path, 100_000)
    assert [_tokens(settings, t) for t in texts] == [254, 255, 300, 3]
    runner = ScriptedEmbedder()
    with caplog.at_level(logging.WARNING, logger="ragserve.indexer"):
        async with app_client(settings, transports={"embedding": runner.transport}, with_worker=True) as client:
            job = await _ingest(client, folder)
    assert job["state"] == "succeeded" and job["counts"]["documents_indexed"] == 4, job
    assert job["counts"]["tokens"] == 254 + 255 + 300 + 3
    assert job["counts"]["chunks_truncated"] == 2
    warning = ("2 chunk(s) longer than the embedding model's window of 254 tokens (256 with its special tokens) "
               "were embedded from their first 254 tokens; chunking \"tokens\" splits them instead")
    assert job["errors"] == [{"item": f"path:{folder}", "error": warning}]
    assert [r.getMessage() for r in caplog.records if r.name == "ragserve.indexer" and r.levelno == logging.WARNING] \
        == [f"job {job['id']}: {warning}"]
