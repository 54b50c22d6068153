"""``export_collection`` and ``import_collection`` on both clients against the real service (uvicorn on
loopback, Qdrant Edge in process, a scripted embedding runner): the file streams to disk and back whole, each
piece seen as it goes, with no embedding call, and the server's refusals come typed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import httpx
import pytest

from service.client import AsyncClient, Client, Conflict, ImportResult, NotFound
from tests.support.app import API_KEY
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings, vector_base64
from tests.support.server import live_server

N = 12


def seed(url: str) -> None:
    docs = [{"id": f"d{i}", "text": f"note {i} on comets", "vector_base64": vector_base64(f"note {i}")}
            for i in range(N)]
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {API_KEY}"}) as http:
        assert http.post("/v1/collections", json={"name": "kb"}).status_code == 201
        assert http.post("/v1/collections/kb/documents", json={"documents": docs}).status_code == 200


def points(path: Path) -> list[str]:
    """The exported points' doc ids, between the header and the trailer."""
    return sorted(json.loads(line)["doc_id"] for line in gzip.decompress(path.read_bytes()).splitlines()[1:-1])


def test_export_and_import_stream_through_the_blocking_client(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    file, sent, received = tmp_path / "kb.ragserve.jsonl.gz", [], []
    with live_server(scripted_settings(tmp_path / "data", qdrant={"edge_process": False}),
                     transports={"embedding": runner.transport}) as url, Client(url, API_KEY) as rs:
        seed(url)
        written = rs.export_collection("kb", file, on_piece=received.append)
        result = rs.import_collection("copy", file, on_piece=sent.append)
        with pytest.raises(Conflict) as again:
            rs.import_collection("copy", file)
        with pytest.raises(NotFound):
            rs.export_collection("missing", tmp_path / "missing.gz")
        copied = rs.get_collection("copy")
    assert written == file and b"".join(received) == file.read_bytes() == b"".join(sent)
    assert points(file) == sorted(f"d{i}" for i in range(N))
    assert isinstance(result, ImportResult)
    assert (result.collection, result.points, result.stored, result.created, result.resumed) == ("copy", N, N,
                                                                                                   True, False)
    assert copied.points == N
    assert again.value.status_code == 409 and again.value.code == "collection_not_empty"
    assert not (tmp_path / "missing.gz").exists()  # a refused export writes no file
    assert runner.inputs() == []  # the vectors travel in the file: nothing is embedded


async def test_export_and_import_stream_through_the_async_client(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    file, sent, received = tmp_path / "kb.ragserve.jsonl.gz", [], []
    with live_server(scripted_settings(tmp_path / "data", qdrant={"edge_process": False}),
                     transports={"embedding": runner.transport}) as url:
        seed(url)
        async with AsyncClient(url, API_KEY) as rs:
            await rs.export_collection("kb", file, on_piece=received.append)
            result = await rs.import_collection("copy", file, on_piece=sent.append)
            exported_again = await rs.export_collection("copy", tmp_path / "copy.gz")
    assert b"".join(received) == file.read_bytes() == b"".join(sent)
    assert (result.collection, result.points, result.stored, result.created) == ("copy", N, N, True)
    assert points(exported_again) == points(file)
    assert runner.inputs() == []
