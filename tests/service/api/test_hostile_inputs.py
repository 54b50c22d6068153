"""Hostile input, table by table: each is a clear 4xx in the error envelope with a machine-readable code (or,
for a file inside an ingest job, that file's error), and nothing stored changes: the point counts and the
search results of both collections are compared before and after every case.

One app serves the whole module (the minilm profile, the real MiniLM runner, the embedded Qdrant Edge
store, the in-process worker), with two collections: ``keep`` (the one attacked) and ``other`` (holding a
secret no request against ``keep`` may reach).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from indexer.parsers import pdf as pdf_parser
from service.config import Settings
from tests.support.app import API_KEY, app_client, wait_for_job
from tests.support.hostile import (
    html_entity_bomb,
    html_external_entity,
    jsonl_record,
    nested_json,
    pdf_encrypted,
    pdf_flate_bomb,
    pdf_reference_bomb,
)
from tests.support.office import encrypt, entity_bomb, make_docx, make_xlsx, replace_part
from tests.support.pdf import make_pdf
from tests.support.runners import RunnerURLs

SECRET = "the launch code is 0000"
SEED = [{"id": f"d{i}", "text": f"stored document number {i}",
         "metadata": {"n": i, "lang": "en", "text": f"meta {i}"}} for i in range(3)]
MB = 1024 * 1024


@dataclass
class Case:
    label: str
    method: str
    path: str
    status: int
    code: str
    json: Any = None
    content: bytes | Callable[[], Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    files: list[tuple[str, tuple[str, bytes]]] | None = None
    data: dict[str, str] | None = None


def raw(body: str | bytes) -> bytes:
    return body.encode() if isinstance(body, str) else body


JSON = {"content-type": "application/json"}
DOCS = "/v1/collections/keep/documents"


def doc(**fields: Any) -> dict[str, Any]:
    return {"documents": [{"id": "new", "text": "a new document", **fields}]}


def search(**fields: Any) -> dict[str, Any]:
    return {"collection": "keep", "query": "stored document", **fields}


def chunked(size: int) -> Callable[[], Any]:
    """A body sent in chunks, without Content-Length (httpx sends it chunked)."""
    async def body() -> AsyncIterator[bytes]:
        yield b'{"collection": "keep", "query": "'
        for _ in range(size // MB):
            yield b"a" * MB
        yield b'"}'
    return body


CASES = [
    # Deep nesting: Python's parser would end in RecursionError; the store cannot read back a payload past
    # its own limit (a collection with one such point fails every search).
    Case("10,000-deep arrays as the body", "POST", "/v1/search", 400, "json_too_deep", content=raw(nested_json(10_000)), headers=JSON),
    Case("10,000-deep arrays in metadata", "POST", DOCS, 400, "json_too_deep",
         content=raw('{"documents": [{"id": "new", "text": "t", "metadata": {"m": ' + nested_json(10_000) + "}}]}"), headers=JSON),
    Case("10,000-deep objects in a filter", "POST", "/v1/search", 400, "json_too_deep",
         content=raw('{"collection": "keep", "query": "q", "filter": ' + '{"a": ' * 10_000 + "1" + "}" * 10_001), headers=JSON),
    Case("10,000-deep ingest body", "POST", "/v1/collections/keep/ingest", 400, "json_too_deep",
         content=raw('{"source": ' + nested_json(10_000) + "}"), headers=JSON),
    Case("10,000-deep ingest options", "POST", "/v1/collections/keep/ingest", 400, "json_too_deep",
         files=[("files", ("a.txt", b"text"))], data={"options": '{"metadata": {"m": ' + nested_json(10_000) + "}}"}),
    Case("10,000-deep upload search request", "POST", "/v1/search/upload", 400, "json_too_deep",
         files=[("image", ("a.png", b"x"))], data={"request": nested_json(10_000)}),
    Case("metadata 40 deep (under the body's 64)", "POST", DOCS, 422, "invalid_metadata", json=doc(metadata={"m": json.loads(nested_json(40))})),
    Case("metadata 17 deep", "POST", DOCS, 422, "invalid_metadata", json=doc(metadata={"m": json.loads(nested_json(16))})),
    # Size.
    Case("50 MB body with Content-Length", "POST", "/v1/search", 413, "request_too_large",
         content=raw('{"collection": "keep", "query": "' + "a" * (50 * MB) + '"}'), headers=JSON),
    Case("50 MB body streamed without Content-Length", "POST", "/v1/search", 413, "request_too_large",
         content=chunked(50 * MB), headers=JSON),
    Case("50 MB uploaded file", "POST", "/v1/collections/keep/ingest", 413, "file_too_large",
         files=[("files", ("big.txt", b"a" * (50 * MB)))]),
    Case("2 MB document text", "POST", DOCS, 413, "document_too_large", json=doc(text="a" * 2_000_000)),
    Case("20 kB of metadata", "POST", DOCS, 413, "metadata_too_large", json=doc(metadata={"m": "a" * 20_000})),
    # Encoding.
    Case("invalid UTF-8", "POST", "/v1/search", 400, "invalid_utf8", content=b'{"collection": "keep", "query": "\xff\xfe"}', headers=JSON),
    Case("UTF-16 body", "POST", "/v1/search", 400, "invalid_utf8", content=json.dumps(search()).encode("utf-16"), headers=JSON),
    Case("invalid UTF-8 in ingest options", "POST", "/v1/collections/keep/ingest", 400, "invalid_utf8",
         files=[("files", ("a.txt", b"text")), ("options", ("o.json", b'{"source_name": "\xff"}'))]),
    Case("lone surrogate in text", "POST", DOCS, 400, "invalid_unicode", content=raw('{"documents": [{"id": "new", "text": "a\\ud800b"}]}'), headers=JSON),
    Case("lone surrogate in a metadata key", "POST", DOCS, 400, "invalid_unicode",
         content=raw('{"documents": [{"id": "new", "text": "t", "metadata": {"\\udc00": 1}}]}'), headers=JSON),
    Case("lone surrogate in a filter key", "POST", "/v1/search", 400, "invalid_unicode",
         content=raw('{"collection": "keep", "query": "q", "filter": {"\\ud800": 1}}'), headers=JSON),
    Case("lone surrogate in embeddings input", "POST", "/v1/embeddings", 400, "invalid_unicode", content=raw('{"input": "x\\ud800"}'), headers=JSON),
    Case("NaN in a vector", "POST", DOCS, 400, "invalid_json",
         content=raw('{"documents": [{"id": "new", "text": "t", "vector": [' + ", ".join(["NaN"] * 384) + "]}]}"), headers=JSON),
    Case("Infinity in metadata", "POST", DOCS, 400, "invalid_json", content=raw('{"documents": [{"id": "new", "text": "t", "metadata": {"x": Infinity}}]}'), headers=JSON),
    Case("1e999 in a vector", "POST", DOCS, 422, "validation_error",
         content=raw('{"documents": [{"id": "new", "text": "t", "vector": [' + ", ".join(["1e999"] * 384) + "]}]}"), headers=JSON),
    Case("a vector of zeros", "POST", DOCS, 422, "zero_vector", json=doc(vector=[0.0] * 384)),
    Case("a 2**64 metadata integer", "POST", DOCS, 422, "invalid_metadata", json=doc(metadata={"n": 2**64})),
    Case("a 2**63 filter integer", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"n": 2**63})),
    Case("a 1e999 range bound", "POST", "/v1/search", 422, "invalid_filter",
         content=raw('{"collection": "keep", "query": "q", "filter": {"n": {"gt": 1e999}}}'), headers=JSON),
    # NUL and control characters.
    Case("NUL in text", "POST", DOCS, 422, "control_character", json=doc(text="a\x00b")),
    Case("ESC in text", "POST", DOCS, 422, "control_character", json=doc(text="a\x1b[31mred")),
    Case("NUL in an id", "POST", DOCS, 422, "control_character", json={"documents": [{"id": "d1\x00", "text": "t"}]}),
    Case("newline in an id", "POST", DOCS, 422, "control_character", json={"documents": [{"id": "d1\nd2", "text": "t"}]}),
    Case("C1 control (NEL) in an id", "POST", DOCS, 422, "control_character", json={"documents": [{"id": "d\x85", "text": "t"}]}),
    Case("NUL in a metadata key", "POST", DOCS, 422, "control_character", json=doc(metadata={"a\x00": 1})),
    Case("empty metadata key", "POST", DOCS, 422, "validation_error", json=doc(metadata={"": 1})),
    Case("NUL in a metadata value", "POST", DOCS, 422, "invalid_metadata", json=doc(metadata={"a": ["x\x00"]})),
    Case("NUL in a filter key", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"n\x00": 1})),
    Case("NUL in a filter value", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"lang": "en\x00"})),
    Case("NUL in a query", "POST", "/v1/search", 422, "control_character", json=search(query="stored\x00")),
    Case("NUL in ingest metadata", "POST", "/v1/collections/keep/ingest", 422, "validation_error",
         files=[("files", ("a.txt", b"text"))], data={"options": json.dumps({"metadata": {"k": "v\x00"}})}),
    Case("control character in an upload name", "POST", "/v1/collections/keep/ingest", 422, "bad_filename",
         files=[("files", ("a\x1b.txt", b"text"))]),
    Case("NUL in a document id path", "DELETE", "/v1/collections/keep/documents/d1%00", 422, "validation_error"),
    Case("NUL in a collection path", "GET", "/v1/collections/keep%00", 422, "validation_error"),
    Case("'..' as a collection path", "GET", "/v1/collections/%2e%2e", 422, "validation_error"),
    # Filters that try to reach other collections or internal fields (syntactically).
    Case("filter key metadata..x", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"metadata..x": 1})),
    Case("filter key ../", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"../": 1})),
    Case("filter key ../other", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"../other": "x"})),
    Case("filter key $", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"$": 1})),
    Case("filter key $where", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"$where": "1"})),
    Case("filter key with a space", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"a b": 1})),
    Case("filter key 5 levels deep", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"a.b.c.d.e": 1})),
    Case("filter key empty", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"": 1})),
    Case("filter operator $ne", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"n": {"$ne": 1}})),
    Case("empty range", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"n": {}})),
    Case("range of strings", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"n": {"gt": "a"}})),
    Case("list of mixed types", "POST", "/v1/search", 422, "invalid_filter", json=search(filter={"n": [1, "a"]})),
    Case("collection ../other in the body", "POST", "/v1/search", 422, "validation_error", json=search(collection="../other")),
    Case("filter field path in a new collection", "POST", "/v1/collections", 422, "validation_error",
         json={"name": "x1", "filter_fields": {"../text": "keyword"}}),
    Case("unsupported BM25 language", "POST", "/v1/collections", 422, "unsupported_language", json={"name": "x2", "sparse": {"language": "klingon"}}),
    Case("k1 of 1e308", "POST", "/v1/collections", 422, "validation_error", json={"name": "x3", "sparse": {"k1": 1e308}}),
    # Absurd top_k / top_n.
    *[Case(f"top_k {v!r}", "POST", "/v1/search", 422, code, json=search(top_k=v)) for v, code in [
        (0, "validation_error"), (-1, "validation_error"), (10**9, "top_k_too_large"), (2**64, "top_k_too_large"),
        (1.5, "validation_error"), (1e300, "top_k_too_large"), ("5", "validation_error"), (True, "validation_error"),
        (None, "validation_error"), ([5], "validation_error")]],
    *[Case(f"rerank.top_n {v!r}", "POST", "/v1/search", 422, code, json=search(rerank={"enabled": False, "top_n": v}))
      for v, code in [(0, "validation_error"), (-1, "validation_error"), (10**9, "top_n_too_large"),
                      (1.5, "validation_error"), ("30", "validation_error"), (False, "validation_error")]],
    *[Case(f"jobs limit {v}", "GET", f"/v1/jobs?limit={v}", 422, "validation_error") for v in ("0", "-1", "1000000000", "1.5", "abc")],
    Case("rerank.enabled 'false' as a string", "POST", "/v1/search", 422, "validation_error", json=search(rerank={"enabled": "false"})),
]


async def _snapshot(client: httpx.AsyncClient) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for name, query in (("keep", "stored document"), ("other", "launch code")):
        info = await client.get(f"/v1/collections/{name}")
        assert info.status_code == 200, info.text
        r = await client.post("/v1/search", json={"collection": name, "query": query, "top_k": 10})
        assert r.status_code == 200, r.text
        state[name] = (info.json()["points"], sorted((h["doc_id"], h["text"], json.dumps(h["metadata"], sort_keys=True))
                                                     for h in r.json()["hits"]))
    state["collections"] = sorted(c["name"] for c in (await client.get("/v1/collections")).json()["collections"])
    return state


@pytest.fixture(scope="module")
async def api(runners: RunnerURLs, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[httpx.AsyncClient]:
    """One app for the module, entered and left in one task of its own: the app's lifespan holds anyio cancel
    scopes (the MCP session manager's), which must exit in the task that entered them, and pytest-asyncio runs
    a fixture's setup and teardown in different tasks."""
    settings = Settings(profile="minilm", data_dir=tmp_path_factory.mktemp("hostile"), api_keys=[API_KEY],
                        runners={"embed_url": runners.minilm_embed})
    ready: asyncio.Future[httpx.AsyncClient] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()

    async def hold() -> None:
        async with app_client(settings, with_worker=True) as client:
            for name in ("keep", "other"):
                r = await client.post("/v1/collections", json={"name": name, "filter_fields": {"n": "integer"}})
                assert r.status_code == 201, r.text
            assert (await client.post(DOCS, json={"documents": SEED})).status_code == 200
            r = await client.post("/v1/collections/other/documents",
                                  json={"documents": [{"id": "s", "text": SECRET}]})
            assert r.status_code == 200
            ready.set_result(client)
            await stop.wait()

    task = asyncio.create_task(hold())
    await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():
        await task  # it failed before the app was ready: raise that
    yield ready.result()
    stop.set()
    await task


def _assert_refused(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text[:500]
    error = r.json()["error"]
    assert error["code"] == code, error
    assert error["message"] and error["type"]
    assert SECRET not in r.text


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
async def test_hostile_request_is_refused_and_changes_nothing(api: httpx.AsyncClient, case: Case) -> None:
    before = await _snapshot(api)
    content = case.content() if callable(case.content) else case.content
    r = await api.request(case.method, case.path, json=case.json, content=content, headers=case.headers or None,
                          files=case.files, data=case.data)
    _assert_refused(r, case.status, case.code)
    assert await _snapshot(api) == before


async def test_filters_reach_metadata_of_one_collection_only(api: httpx.AsyncClient) -> None:
    """Filter keys name metadata fields (``doc_id`` aside): ``text`` and ``content_hash`` are the metadata
    fields of those names, never the stored text or hash, and no key reaches another collection."""
    before = await _snapshot(api)

    async def hits(**flt: Any) -> list[str]:
        r = await api.post("/v1/search", json={"collection": "keep", "query": "stored document", "top_k": 10,
                                               "filter": flt})
        assert r.status_code == 200, r.text
        assert SECRET not in r.text
        return sorted(h["doc_id"] for h in r.json()["hits"])

    stored_hash = await _stored_content_hash(api)
    assert await hits(text="stored document number 1") == []  # the stored text is not a filter field
    assert await hits(text="meta 1") == ["d1"]  # metadata.text is
    assert await hits(content_hash=stored_hash) == []
    assert await hits(chunk_index=0) == [] and await hits(chunk_count=1) == []
    assert await hits(doc_id="d2") == ["d2"]  # documented: the document id itself
    assert await hits(doc_id="s") == []  # the other collection's document
    assert await hits(collection="other") == [] and await hits(**{"metadata.text": "meta 1"}) == []
    assert await hits(n={"gte": 1}) == ["d1", "d2"]
    assert await _snapshot(api) == before


async def _stored_content_hash(api: httpx.AsyncClient) -> str:
    from service.documents.writer import content_hash

    return content_hash(SEED[1]["text"], SEED[1]["metadata"])


@dataclass
class FileCase:
    label: str
    name: str
    data: Callable[[], bytes]
    reason: str


FILE_CASES = [
    FileCase("malformed PDF", "broken.pdf", lambda: b"%PDF-1.4\n1 0 obj << /Type /Catalog", "cannot parse pdf"),
    FileCase("truncated PDF", "truncated.pdf", lambda: make_pdf(["one page"])[:300], "cannot parse pdf"),
    FileCase("encrypted PDF", "locked.pdf", pdf_encrypted, "pdf file is encrypted"),
    FileCase("PDF decompression bomb (0.6 MB to 200 MB)", "bomb.pdf", pdf_flate_bomb, "pdf refused as a decompression bomb"),
    FileCase("PDF reference bomb", "refs.pdf", lambda: pdf_reference_bomb(100, 1000), "content operators"),
    FileCase("HTML entity bomb", "laughs.html", html_entity_bomb, "html refused: it declares a DTD"),
    FileCase("HTML external entity", "xxe.html", html_external_entity, "html refused: it declares a DTD"),
    FileCase("encrypted Word file", "locked.docx", lambda: encrypt(make_docx()), "docx file is encrypted"),
    FileCase("Word zip bomb", "zeros.docx", lambda: replace_part(make_docx(), "customXml/zeros.xml", b"\0" * (20 * MB)),
             "docx refused as a zip bomb"),
    FileCase("Excel entity bomb", "laughs.xlsx", lambda: replace_part(make_xlsx(), "xl/workbook.xml", entity_bomb(b"<workbook/>")),
             "declares a DTD or entities"),
    FileCase("truncated Word file", "cut.docx", lambda: make_docx()[:500], "not a valid docx file"),
    FileCase("JSONL metadata 200 deep", "deep.jsonl", lambda: jsonl_record(metadata={"m": json.loads(nested_json(200))}),
             "nested deeper than 16 levels"),
    FileCase("JSONL nested past the parser", "deeper.jsonl", lambda: b'{"id": "r", "text": "t", "metadata": ' + nested_json(10_000).encode() + b"}\n",
             "maximum recursion depth"),
    FileCase("JSONL lone surrogate", "sur.jsonl", lambda: b'{"id": "r", "text": "a\\ud800b"}\n', "lone surrogate"),
    FileCase("JSONL NaN", "nan.jsonl", lambda: b'{"id": "r", "text": "t", "metadata": {"x": NaN}}\n', "NaN is not a JSON number"),
    FileCase("JSONL 2**70", "big.jsonl", lambda: jsonl_record(metadata={"n": 2**70}), "does not fit in 64 bits"),
    FileCase("JSONL NUL in an id", "nul.jsonl", lambda: jsonl_record(id="r\x00"), "control character U+0000"),
    FileCase("NUL bytes in a .txt", "binary.txt", lambda: b"ELF\x00\x02\x01\x01\x00 header", "a NUL byte"),
    FileCase("invalid UTF-8 text", "latin1.txt", lambda: "café".encode("latin-1"), "not valid UTF-8"),
    FileCase("CSV field over the csv module's limit", "wide.csv", lambda: b'a,b\n"' + b"x" * 200_000 + b'",y\n', "field larger than field limit"),
    FileCase("legacy binary Office file", "old.doc", lambda: b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 512, "legacy binary Office format"),
]


@pytest.mark.parametrize("case", FILE_CASES, ids=[c.label for c in FILE_CASES])
async def test_hostile_file_fails_its_job_and_changes_nothing(
    api: httpx.AsyncClient, case: FileCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pdf_parser, "MAX_OPERATORS", 20_000)  # the reference bomb runs 100,000
    before = await _snapshot(api)
    r = await api.post("/v1/collections/keep/ingest", files=[("files", (case.name, case.data()))])
    assert r.status_code == 202, r.text
    job = await wait_for_job(api, r.json()["id"], timeout_s=300)
    assert job["state"] == "failed", job
    assert job["counts"]["documents_indexed"] == 0 and job["counts"]["chunks"] == 0, job["counts"]
    (error,) = job["errors"]
    assert case.reason in error["error"], error
    assert await _snapshot(api) == before


def test_the_tables_are_counted() -> None:
    """The count the issue asks for, kept next to the tables it counts."""
    assert (len(CASES), len(FILE_CASES)) == (81, 21)


