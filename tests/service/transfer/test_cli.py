"""``ragserve export`` and ``ragserve import`` as clients of running APIs (real HTTP): a collection goes from one
service to another through a file, with its progress line, and no embedding request reaches the runner."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import httpx
import pytest

from service.cli import main
from tests.support.app import API_KEY
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings, vector_base64
from tests.support.server import live_server

N = 30


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in gzip.decompress(path.read_bytes()).splitlines()]


def test_export_to_a_file_and_import_it_into_another_service(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runner = ScriptedEmbedder()
    file = tmp_path / "kb.ragserve.jsonl.gz"
    auth = ["--api-key", API_KEY]
    docs = [{"id": f"d{i}", "text": f"note {i} on comets", "vector_base64": vector_base64(f"note {i}")}
            for i in range(N)]
    with live_server(scripted_settings(tmp_path / "a", qdrant={"edge_process": False}),
                     transports={"embedding": runner.transport}) as a:
        with httpx.Client(base_url=a, headers={"Authorization": f"Bearer {API_KEY}"}) as http:
            assert http.post("/v1/collections", json={"name": "kb", "sparse": True}).status_code == 201
            assert http.post("/v1/collections/kb/documents", json={"documents": docs}).status_code == 200
        main(["export", "kb", "-o", str(file), "--url", a, *auth])
    exported = capsys.readouterr()

    with live_server(scripted_settings(tmp_path / "b", qdrant={"edge_process": False}),
                     transports={"embedding": runner.transport}) as b:
        main(["import", str(file), "--collection", "copy", "--url", b, *auth])
        imported = capsys.readouterr()
        main(["export", "copy", "-o", str(tmp_path / "copy.gz"), "--url", b, "--quiet", *auth])
        with pytest.raises(SystemExit) as again:
            main(["import", str(file), "--collection", "copy", "--url", b, "--quiet", *auth])

    assert exported.out.strip() == str(file)
    assert f"points {N}/{N}" in exported.err and f"points {N}/{N}" in imported.err
    assert imported.out.startswith(f"created 'copy': {N} points imported, {N} stored")
    assert "409 collection_not_empty" in str(again.value)
    assert runner.inputs() == []  # the documents came with their vectors; export and import embedded nothing

    def chunks(path: Path) -> list[tuple[object, ...]]:
        return sorted((p["doc_id"], p["chunk_index"], p["text"], p["dense"], json.dumps(p["sparse"]))
                      for p in lines(path)[1:-1])

    assert chunks(tmp_path / "copy.gz") == chunks(file)
    assert lines(tmp_path / "copy.gz")[0]["collection"] == "copy"
