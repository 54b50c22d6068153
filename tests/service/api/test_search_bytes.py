"""The exact bytes ``POST /v1/search`` answers, held to a golden file recorded before the search path was made
cheaper (issue 20): dense, sparse and hybrid searches, with filters, tenants' metadata in several scripts, score
details, and the refusals a search meets (unknown collection, bad filter, top_k over the limit, bad JSON).

The scripted embedding runner at the network edge gives every text a fixed vector, so every score is the engine's
arithmetic on the same data and the bytes repeat. Scores are compared as numbers to float32's precision and the bytes
around them exactly (:func:`engine_scores`). Two fields are volatile and masked, explicitly: each number in
``timings_ms`` (milliseconds measured on the clock) becomes ``0``; its keys, their order and ``embed_cached``
(a bool) stay. And ``search_id``, random by design (issue 39, added after the golden file): every answer of 200
must open with it, ``s_`` and 32 hex digits, and it is cut before the comparison, so the file still holds the
bytes recorded before it and proves nothing else moved. Response headers are compared too, less ``x-request-id`` (a fresh id per request) and
``content-length`` (which follows the timings' digits: it is checked against the body's length instead).

Run with the store in its own process (the default) and in this process: the same bytes either way.

Regenerate (only for a change that means to change the wire): ``WRITE_SEARCH_GOLDEN=1 pytest <this file>``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.app import app_client
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings

GOLDEN = Path(__file__).parent / "golden" / "search_bytes.json"

DOCS = [
    {"id": "boot-1", "text": "The device fails to boot and shows a blank screen after the firmware update.",
     "metadata": {"team": "hw", "year": 2023, "tags": ["boot", "firmware"], "score": 0.5}},
    {"id": "boot-2", "text": "After updating firmware the unit will not start; the display stays dark.",
     "metadata": {"team": "hw", "year": 2024, "lang": "en", "nested": {"a": [1, 2, {"b": None}]}}},
    {"id": "code", "text": "Boot halted with error XQ-7719 reported by the loader on the serial console.",
     "metadata": {"team": "fw", "year": 2022}},
    {"id": "fr", "text": "L'appareil ne démarre plus après la mise à jour : écran noir, « erreur XQ-7719 ».",
     "metadata": {"team": "fw", "year": 2024, "auteur": "Zoë Ünal"}},
    {"id": "ja", "text": "ファームウェア更新後にデバイスが起動しません。画面は黒いままです。",
     "metadata": {"team": "hw", "year": 2021, "note": "日本語 \u2028 line sep, emoji \U0001f680, quote \" and \\"}},
    {"id": "long", "text": " ".join(f"Paragraph {i} about the loader and the reset button." for i in range(60)),
     "metadata": {"team": "docs", "year": 2020, "big": 12345678901234, "neg": -3.25e-7}},
]

SEARCHES: list[dict[str, Any]] = [
    {"collection": "kb", "query": "the screen stays black after an update", "mode": "dense"},
    {"collection": "kb", "query": "the screen stays black after an update", "mode": "dense"},  # a cache hit
    {"collection": "kb", "query": "what does XQ-7719 mean", "mode": "sparse", "top_k": 3},
    {"collection": "kb", "query": "what does XQ-7719 mean", "mode": "hybrid"},
    {"collection": "kb", "query": "what does XQ-7719 mean", "mode": "hybrid", "fusion": "dbsf", "top_k": 4},
    {"collection": "kb", "query": "loader reset", "mode": "hybrid", "score_details": True},
    {"collection": "kb", "query": "loader reset", "mode": "dense", "score_details": True, "top_k": 2},
    {"collection": "kb", "query": "loader reset", "mode": "sparse", "score_details": True},
    {"collection": "kb", "query": "device boot", "filter": {"team": "hw"}, "rerank": {"enabled": False}},
    {"collection": "kb", "query": "device boot", "filter": {"year": {"gte": 2022, "lt": 2024}}, "mode": "dense"},
    {"collection": "kb", "query": "device boot", "filter": {"team": ["fw", "docs"], "doc_id": "code"}},
    {"collection": "kb", "query": "démarrage écran noir", "mode": "hybrid", "top_k": 6},
    {"collection": "kb", "query": "起動しません", "mode": "dense", "top_k": 1},
    {"collection": "kb", "query": "  padded query  ", "mode": "dense", "instruction": "Find the passage"},
    {"collection": "kb", "query": "the, of and", "mode": "hybrid"},  # stop-words only: hybrid degrades to dense
    {"collection": "kb", "query": "nothing", "filter": {"team": "nobody"}},  # no hits
    {"collection": "nope", "query": "x"},  # 404
    {"collection": "kb", "query": "x", "filter": {"year": {"gte": "a"}}},  # 422
    {"collection": "kb", "query": "x", "top_k": 100000},  # 400 top_k_too_large
    {"collection": "kb", "query": "   "},  # 400 empty_query
    {"collection": "kb", "query": "the, of and", "mode": "sparse"},  # 400 empty_sparse_query
    {"collection": "kb", "query": "x", "extra": 1},  # 422 extra field
]
RAW_BODIES = [b'{"collection": "kb", "query": ', b'{"collection": "kb", "query": NaN}']  # 400 invalid_json
VOLATILE_HEADERS = {"x-request-id", "content-length"}

_TIMINGS = re.compile(rb'"timings_ms":\{[^{}]*\}')
_NUMBER = re.compile(rb'(":)-?[0-9][0-9.eE+-]*')


_SCORE = re.compile(r'("(?:score|vector_score|dense_score|bm25_score|rerank_score)":)(-?[0-9][0-9.eE+-]*)')


def engine_scores(body: str) -> tuple[str, list[float]]:
    """``body`` with each score's digits replaced by ``S``, and the scores. A score is the engine's float32
    arithmetic, whose last bits follow the CPU's vector instructions (the golden file was recorded on an Intel
    host with AMX; an AMD EPYC host differs in the 7th digit): the bytes around them must be the same, the
    scores the same to float32's precision."""
    scores = [float(m.group(2)) for m in _SCORE.finditer(body)]
    return _SCORE.sub(r"\g<1>S", body), scores


_SEARCH_ID = re.compile(rb'^\{"search_id":"s_[0-9a-f]{32}",')


def masked(body: bytes, status: int) -> str:
    """``body`` with each number in ``timings_ms`` replaced by 0, and an answer's leading ``search_id`` cut (the
    volatile parts of a search's answer)."""
    if status == 200:
        body, cut = _SEARCH_ID.subn(b"{", body)
        assert cut == 1, body[:80]
    return _TIMINGS.sub(lambda m: _NUMBER.sub(rb"\g<1>0", m.group(0)), body).decode()


async def _record(tmp_path: Path, *, edge_process: bool) -> list[dict[str, Any]]:
    runner = ScriptedEmbedder()
    settings = scripted_settings(tmp_path, qdrant={"edge_process": edge_process})
    settings.limits.max_top_k = 50
    async with app_client(settings, transports={"embedding": runner.transport}) as client:
        r = await client.post("/v1/collections", json={"name": "kb"})
        assert r.status_code == 201, r.text
        r = await client.post("/v1/collections/kb/documents", json={"documents": DOCS})
        assert r.status_code == 200, r.text
        answers = []
        requests = [json.dumps(s).encode() for s in SEARCHES] + RAW_BODIES
        for body in requests:
            r = await client.post("/v1/search", content=body, headers={"content-type": "application/json"})
            assert r.headers["content-length"] == str(len(r.content))
            headers = [[k, v] for k, v in r.headers.multi_items() if k not in VOLATILE_HEADERS]
            answers.append({"request": body.decode(), "status": r.status_code, "headers": headers,
                            "body": masked(r.content, r.status_code)})
    return answers


def write_golden(answers: list[dict[str, Any]], path: Path, *, write: bool) -> None:
    """With ``write``, record ``answers`` as the golden file and end the test: comparing them with the file
    just written would pass whatever they are."""
    if write:
        path.write_text(json.dumps(answers, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        pytest.skip(f"wrote {path}: run again without WRITE_SEARCH_GOLDEN to compare against it")


def test_writing_the_golden_file_ends_the_test_without_comparing(tmp_path: Path) -> None:
    path = tmp_path / "golden.json"
    answers = [{"request": {"query": "q"}, "status": 200, "body": "{}"}]
    write_golden(answers, path, write=False)
    assert not path.exists()
    with pytest.raises(pytest.skip.Exception, match="without WRITE_SEARCH_GOLDEN"):
        write_golden(answers, path, write=True)
    assert json.loads(path.read_text(encoding="utf-8")) == answers


@pytest.mark.parametrize("edge_process", [True, False], ids=["store-process", "store-in-process"])
async def test_search_answers_are_the_golden_bytes(tmp_path: Path, edge_process: bool) -> None:
    answers = await _record(tmp_path, edge_process=edge_process)
    if edge_process:
        write_golden(answers, GOLDEN, write=bool(os.environ.get("WRITE_SEARCH_GOLDEN")))
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert [a["request"] for a in answers] == [g["request"] for g in golden]
    for answer, expected in zip(answers, golden, strict=True):
        (body, scores), (golden_body, golden_scores) = engine_scores(answer["body"]), engine_scores(expected["body"])
        assert {**answer, "body": body} == {**expected, "body": golden_body}, answer["request"]
        assert scores == pytest.approx(golden_scores, rel=1e-5, abs=1e-7), answer["request"]
    assert {a["status"] for a in answers} >= {200, 400, 404, 422}  # the set covers answers and refusals
    assert any('"hits":[]' in a["body"] for a in answers)
