"""ragserve's operations, written once (see :mod:`service.client.protocol`); ``Client`` and ``AsyncClient``
inherit them and differ only in how they perform the steps."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from .errors import NotFound, RateLimited, Timeout, Unavailable
from .inputs import Document, ImageArg, Message, chat_messages, document_body, image_bytes, image_url
from .models import (
    ChatResult,
    Collection,
    ContextResult,
    DeleteResult,
    Embeddings,
    FeedbackResult,
    ImportResult,
    Job,
    RerankResult,
    SearchResult,
    Snapshot,
    SnapshotListing,
    UpsertResult,
)
from .options import IngestOptions
from .paths import name_prefix_problem, path_entries, read_files
from .protocol import operation, streaming
from .steps import Call, Download, Operation, Sleep, Step, Upload
from .streaming import ChatStreamDecoder, StreamCall, chat_result

DEFAULT_URL = "http://127.0.0.1:8000"
ProgressCallback = Callable[[Job], None]
Mode = Literal["dense", "sparse", "hybrid"]


def _name(name: str) -> str:
    return quote(name, safe="")


def _options(options: IngestOptions | Mapping[str, Any] | None, **defaults: Any) -> dict[str, Any]:
    """Ingest options checked here (:mod:`.options`), so a typo fails before any upload."""
    given = options.model_dump(exclude_unset=True) if isinstance(options, BaseModel) else dict(options or {})
    return IngestOptions.model_validate({**defaults, **given}).model_dump(exclude_none=True)


class ClientBase:
    """Configuration both clients share, and every operation."""

    def __init__(self, base_url: str | None, api_key: str | None, *, max_retries: int) -> None:
        self.base_url = (base_url or os.environ.get("RAGSERVE_URL") or DEFAULT_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("RAGSERVE_API_KEY")
        self.max_retries = max_retries
        self.max_retry_wait_s = 30.0

    @property
    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _send(self, call: Call) -> Generator[Step, httpx.Response | None, httpx.Response]:
        """One exchange, retried after the server's Retry-After when it was refused for load (429, or 503
        with Retry-After: nothing was done, so resending is safe), at most ``max_retries`` times."""
        attempt = 0
        while True:
            try:
                response = yield call
                assert response is not None
                return response
            except (RateLimited, Unavailable) as exc:
                if exc.retry_after is None or attempt >= self.max_retries:
                    raise
                attempt += 1
                yield Sleep(min(exc.retry_after, self.max_retry_wait_s))

    def _json(self, call: Call) -> Generator[Step, httpx.Response | None, Any]:
        response = yield from self._send(call)
        return response.json() if response.content else None

    # --- collections --------------------------------------------------------------------------------

    def _submitted(self, call: Call, *, wait: bool, progress: ProgressCallback | None, poll_s: float,
                   timeout_s: float | None) -> Generator[Step, httpx.Response | None, Job]:
        """An ingest job submitted by ``call``; with ``wait``, polled to its end."""
        job = Job.model_validate((yield from self._json(call)))
        if not wait:
            return job
        return (yield from ClientBase.wait_for_job.fn(self, job.id, progress=progress, poll_s=poll_s,
                                                       timeout_s=timeout_s))

    @operation
    def list_collections(self) -> Operation[list[Collection]]:
        body = yield from self._json(Call("GET", "/v1/collections"))
        return [Collection.model_validate(c) for c in body["collections"]]

    @operation
    def get_collection(self, name: str) -> Operation[Collection]:
        """The collection with its exact point count; raises NotFound."""
        return Collection.model_validate((yield from self._json(Call("GET", f"/v1/collections/{_name(name)}"))))

    @operation
    def build_index(self, name: str) -> Operation[Collection]:
        """Start building the collection's index in the background (embedded store; an admin key): the answer's
        ``index`` says a build runs, and :meth:`get_collection`'s says when it ended and how."""
        return Collection.model_validate((yield from self._json(Call("POST", f"/v1/collections/{_name(name)}/index"))))

    @operation
    def create_collection(self, name: str, *, dimensions: int | None = None,
                          filter_fields: Mapping[str, str] | None = None,
                          sparse: bool | Mapping[str, Any] = True) -> Operation[Collection]:
        """Create a collection; raises Conflict if it exists."""
        body: dict[str, Any] = {"name": name, "filter_fields": dict(filter_fields or {}),
                                "sparse": sparse if isinstance(sparse, bool) else dict(sparse)}
        if dimensions is not None:
            body["dimensions"] = dimensions
        return Collection.model_validate((yield from self._json(Call("POST", "/v1/collections", json=body))))

    @operation
    def ensure_collection(self, name: str, *, dimensions: int | None = None,
                          filter_fields: Mapping[str, str] | None = None,
                          sparse: bool | Mapping[str, Any] = True) -> Operation[Collection]:
        """The collection, created first (with these settings) when there is none."""
        try:
            return (yield from ClientBase.get_collection.fn(self, name))
        except NotFound:
            return (yield from ClientBase.create_collection.fn(
                self, name, dimensions=dimensions, filter_fields=filter_fields, sparse=sparse))

    @operation
    def delete_collection(self, name: str) -> Operation[None]:
        yield from self._send(Call("DELETE", f"/v1/collections/{_name(name)}"))

    # --- documents ----------------------------------------------------------------------------------

    @operation
    def upsert_documents(self, collection: str,
                         documents: Iterable[Document | Mapping[str, Any]]) -> Operation[UpsertResult]:
        """Embed and store already split documents in one call (the server's limit is 1,000 a call)."""
        body = {"documents": [document_body(d) for d in documents]}
        path = f"/v1/collections/{_name(collection)}/documents"
        return UpsertResult.model_validate((yield from self._json(Call("POST", path, json=body))))

    @operation
    def delete_document(self, collection: str, doc_id: str) -> Operation[None]:
        """Delete one document and all its chunks; raises NotFound when the collection does not hold it."""
        yield from self._send(Call("DELETE", f"/v1/collections/{_name(collection)}/documents/{quote(doc_id)}"))

    @operation
    def delete_documents(self, collection: str, *, filter: Mapping[str, Any] | None = None, all: bool = False,
                         dry_run: bool = False) -> Operation[DeleteResult]:
        """Delete every document any chunk of which matches ``filter`` (the search filter language), whole.
        ``dry_run`` only counts. An empty filter is refused unless ``all=True``."""
        body = {"filter": dict(filter or {}), "all": all, "dry_run": dry_run}
        path = f"/v1/collections/{_name(collection)}/documents/delete"
        return DeleteResult.model_validate((yield from self._json(Call("POST", path, json=body))))

    # --- ingest jobs --------------------------------------------------------------------------------

    @operation
    def ingest_files(self, collection: str, files: Mapping[str, bytes] | Sequence[tuple[str, bytes]], *,
                     options: IngestOptions | Mapping[str, Any] | None = None, wait: bool = True,
                     progress: ProgressCallback | None = None, poll_s: float = 0.5,
                     timeout_s: float | None = None) -> Operation[Job]:
        """Upload files (name: a relative path, kept as the document id) as one ingest job; with ``wait``,
        poll it to its end, calling ``progress(job)`` after every poll."""
        pairs = list(files.items()) if isinstance(files, Mapping) else list(files)
        if not pairs:
            raise ValueError("no files to ingest")
        call = Call("POST", f"/v1/collections/{_name(collection)}/ingest",
                    files=[("files", (name, data, "application/octet-stream")) for name, data in pairs],
                    data={"options": json.dumps(_options(options))})
        return (yield from self._submitted(call, wait=wait, progress=progress, poll_s=poll_s, timeout_s=timeout_s))

    @operation
    def ingest_path(self, collection: str, path: str | os.PathLike[str], *, server_path: bool = False,
                    include: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
                    name_prefix: str = "", options: IngestOptions | Mapping[str, Any] | None = None,
                    on_skip: Callable[[str, str], None] | None = None, wait: bool = True,
                    progress: ProgressCallback | None = None, poll_s: float = 0.5,
                    timeout_s: float | None = None) -> Operation[Job]:
        """Index a file or folder: uploaded from here (read now; ``on_skip(name, why)`` for a file that
        cannot be read), or with ``server_path`` read by the server itself, under its allowed roots.
        The source is named ``path:<absolute path>``, so a re-run with ``prune`` re-syncs it either way."""
        problem = name_prefix_problem(name_prefix)
        if problem:
            raise ValueError(f"name_prefix {name_prefix!r}: {problem}")
        root = Path(path).resolve()
        source = {"kind": "path", "path": str(root), "include": list(include or ["**/*"]),
                  "exclude": list(exclude or []), "recursive": True, "name_prefix": name_prefix}
        body = _options(options, source_name=f"path:{root}")
        if server_path:
            call = Call("POST", f"/v1/collections/{_name(collection)}/ingest", json={**body, "source": source})
            return (yield from self._submitted(call, wait=wait, progress=progress, poll_s=poll_s,
                                               timeout_s=timeout_s))
        files, skipped = read_files(path_entries(root, include=source["include"], exclude=source["exclude"],
                                                 name_prefix=name_prefix))
        for name, why in skipped:
            if on_skip is not None:
                on_skip(name, why)
        if not files:
            raise ValueError(f"no files to index under {path}")
        return (yield from ClientBase.ingest_files.fn(self, collection, files, options=body, wait=wait,
                                                       progress=progress, poll_s=poll_s, timeout_s=timeout_s))

    @operation
    def ingest_urls(self, collection: str, urls: Sequence[str], *,
                    options: IngestOptions | Mapping[str, Any] | None = None, wait: bool = True,
                    progress: ProgressCallback | None = None, poll_s: float = 0.5,
                    timeout_s: float | None = None) -> Operation[Job]:
        """Index web pages the server fetches itself (only from its allowed domains)."""
        call = Call("POST", f"/v1/collections/{_name(collection)}/ingest",
                    json={**_options(options), "source": {"kind": "url", "urls": list(urls)}})
        return (yield from self._submitted(call, wait=wait, progress=progress, poll_s=poll_s, timeout_s=timeout_s))

    @operation
    def get_job(self, job_id: str) -> Operation[Job]:
        return Job.model_validate((yield from self._json(Call("GET", f"/v1/jobs/{_name(job_id)}"))))

    @operation
    def list_jobs(self, *, limit: int = 50) -> Operation[list[Job]]:
        body = yield from self._json(Call("GET", "/v1/jobs", params={"limit": limit}))
        return [Job.model_validate(j) for j in body["jobs"]]

    @operation
    def cancel_job(self, job_id: str) -> Operation[Job]:
        return Job.model_validate((yield from self._json(Call("DELETE", f"/v1/jobs/{_name(job_id)}"))))

    @operation
    def wait_for_job(self, job_id: str, *, progress: ProgressCallback | None = None, poll_s: float = 0.5,
                     timeout_s: float | None = None) -> Operation[Job]:
        """Poll a job until it has ended (succeeded, failed or cancelled: look at ``job.state``); raises
        Timeout (status None) when ``timeout_s`` passes first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            job = yield from ClientBase.get_job.fn(self, job_id)
            if progress is not None:
                progress(job)
            if job.done:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise Timeout(f"job {job_id} still {job.state} after {timeout_s}s", status_code=None,
                              code="wait_timeout")
            yield Sleep(poll_s)

    # --- admin --------------------------------------------------------------------------------------

    @operation
    def create_snapshot(self, collection: str | None = None) -> Operation[Snapshot]:
        """Snapshot one collection, or every one (an admin key), on the API's machine while it serves."""
        body = {} if collection is None else {"collection": collection}
        return Snapshot.model_validate((yield from self._json(Call("POST", "/v1/admin/snapshots", json=body))))

    @operation
    def list_snapshots(self) -> Operation[list[Snapshot]]:
        """The snapshots on the API's machine, oldest first (those whose manifest cannot be read left out)."""
        return (yield from ClientBase.snapshot_listing.fn(self)).snapshots

    @operation
    def snapshot_listing(self) -> Operation[SnapshotListing]:
        """The snapshots, and apart, the folders whose manifest cannot be read."""
        return SnapshotListing.model_validate((yield from self._json(Call("GET", "/v1/admin/snapshots"))))

    # --- export and import --------------------------------------------------------------------------

    @operation
    def export_collection(self, collection: str, path: str | os.PathLike[str], *,
                          on_piece: Callable[[bytes], None] | None = None) -> Operation[Path]:
        """Download ``collection`` (points, vectors, settings) as an export file (``.ragserve.jsonl.gz``) at
        ``path``, streamed to disk and flushed before this returns; ``on_piece(bytes)`` sees each compressed
        piece as it is written (a progress line). Returns the path."""
        target = Path(path)
        call = Call("GET", f"/v1/collections/{_name(collection)}/export", download=Download(target, on_piece))
        yield from self._send(call)
        return target

    @operation
    def import_collection(self, collection: str, path: str | os.PathLike[str], *,
                          on_piece: Callable[[bytes], None] | None = None) -> Operation[ImportResult]:
        """Upload an export file into ``collection`` (new or empty), streamed from disk, with no embedding call
        (the file holds the vectors); run again, it finishes an import that was cut off. ``on_piece(bytes)``
        sees each compressed piece as it is sent."""
        call = Call("POST", f"/v1/collections/{_name(collection)}/import", headers={"Content-Type": "application/gzip"},
                    upload=Upload(Path(path), on_piece))
        return ImportResult.model_validate((yield from self._json(call)))

    # --- search -------------------------------------------------------------------------------------

    @operation
    def search(self, collection: str, query: str | None = None, *, top_k: int = 10,
               filter: Mapping[str, Any] | None = None, mode: Mode | None = None,
               fusion: Literal["rrf", "dbsf"] | None = None, rerank: bool | None = None,
               rerank_candidates: int | None = None, rerank_instruction: str | None = None,
               instruction: str | None = None, image: ImageArg | None = None,
               score_details: bool = False) -> Operation[SearchResult]:
        """Ranked chunks for a query, an image, or both. ``rerank`` None: the server's default (on when it
        has a reranker). An image as a URL goes as ``image.url``; bytes or a Path are uploaded.
        ``score_details``: each hit also carries ``dense_score`` and ``bm25_score`` (in a hybrid search, two
        more engine queries on the server)."""
        body: dict[str, Any] = {"collection": collection, "top_k": top_k}
        if score_details:  # sent only when asked: a server before it refuses unknown fields
            body["score_details"] = True
        options = {"query": query, "filter": dict(filter) if filter else None, "mode": mode, "fusion": fusion,
                   "instruction": instruction}
        body.update({k: v for k, v in options.items() if v is not None})
        if rerank is not None or rerank_candidates is not None or rerank_instruction is not None:
            body["rerank"] = {"enabled": True if rerank is None else rerank}
            if rerank_candidates is not None:
                body["rerank"]["top_n"] = rerank_candidates
            if rerank_instruction is not None:
                body["rerank"]["instruction"] = rerank_instruction
        url = image_url(image) if image is not None else None
        if image is None or url is not None:
            if url is not None:
                body["image"] = {"url": url}
            call = Call("POST", "/v1/search", json=body)
        else:
            call = Call("POST", "/v1/search/upload", data={"request": json.dumps(body)},
                        files=[("image", image_bytes(image))])  # type: ignore[arg-type]
        return SearchResult.model_validate((yield from self._json(call)))

    @operation
    def context(self, collection: str | Sequence[str], query: str | None = None, *, budget_tokens: int,
                messages: Sequence[Message] | None = None, filter: Mapping[str, Any] | None = None,
                mode: Mode | None = None, rerank: bool | None = None, candidates: int | None = None,
                neighbours: int | None = None, tokenizer: str | None = None,
                order: Literal["score", "edges"] | None = None, template: str | None = None,
                overflow: Literal["cut", "skip"] | None = None, max_passages: int | None = None,
                rewrite: bool | None = None) -> Operation[ContextResult]:
        """A budgeted, de-duplicated, cited context for ``query`` or a conversation (``messages``, exactly one
        of the two) from one collection or several."""
        body: dict[str, Any] = {"budget_tokens": budget_tokens}
        if isinstance(collection, str):
            body["collection"] = collection
        else:
            body["collections"] = list(collection)
        if messages is not None:
            body["messages"] = chat_messages(messages, None)
        options = {"query": query, "filter": dict(filter) if filter else None, "mode": mode,
                   "candidates": candidates, "neighbours": neighbours, "tokenizer": tokenizer, "order": order,
                   "template": template, "overflow": overflow, "max_passages": max_passages, "rewrite": rewrite}
        body.update({k: v for k, v in options.items() if v is not None})
        if rerank is not None:
            body["rerank"] = {"enabled": rerank}
        return ContextResult.model_validate((yield from self._json(Call("POST", "/v1/context", json=body))))

    # --- feedback -----------------------------------------------------------------------------------

    @operation
    def feedback(self, search_id: str, *, chunk_id: str | None = None, doc_id: str | None = None, rating: int,
                 comment: str | None = None) -> Operation[FeedbackResult]:
        """Rate a hit of a search: ``search_id`` from a search, context or grounded chat result; ``rating`` -1
        wrong, 0 not relevant, 1 to 3 relevant. Name the hit by ``chunk_id`` (a hit's or citation's ``id``) or by
        ``doc_id`` (its best chunk the search returned), one of the two. The server checks every argument (one
        rule for every client): InvalidRequest ``no_hit_named``, ``hit_not_in_search``, ``rating_out_of_range``
        or ``comment_too_long``; NotFound ``search_not_found`` for an unknown or expired id; Forbidden
        ``search_of_another_tenant``."""
        body: dict[str, Any] = {"search_id": search_id, "rating": rating}
        named = {"chunk_id": chunk_id, "doc_id": doc_id, "comment": comment}
        body.update({k: v for k, v in named.items() if v is not None})
        return FeedbackResult.model_validate((yield from self._json(Call("POST", "/v1/feedback", json=body))))

    # --- generation ---------------------------------------------------------------------------------

    @operation
    def chat(self, messages: str | Sequence[Message], *, collections: Sequence[str] | None = None,
             image: ImageArg | None = None, model: str | None = None, max_tokens: int | None = None,
             temperature: float | None = None, context_top_k: int | None = None, rerank: bool | None = None,
             filter: Mapping[str, Any] | None = None,
             extra: Mapping[str, Any] | None = None) -> Operation[ChatResult]:
        """A chat completion; with ``collections``, grounded in them, with citations. ``extra``: more
        request fields as the API takes them (seed, top_p, stop...)."""
        body = _chat_body(messages, collections, image, model, max_tokens, temperature, context_top_k, rerank,
                          filter, extra, stream=False)
        return chat_result((yield from self._json(Call("POST", "/v1/chat/completions", json=body))))

    @streaming
    def chat_stream(self, messages: str | Sequence[Message], *, collections: Sequence[str] | None = None,
                    image: ImageArg | None = None, model: str | None = None, max_tokens: int | None = None,
                    temperature: float | None = None, context_top_k: int | None = None,
                    rerank: bool | None = None, filter: Mapping[str, Any] | None = None,
                    extra: Mapping[str, Any] | None = None) -> StreamCall:
        """The same, streamed: iterate the stream for text deltas; afterwards ``stream.citations``,
        ``stream.retrieval`` and ``stream.finish_reason`` hold the end of the answer."""
        body = _chat_body(messages, collections, image, model, max_tokens, temperature, context_top_k, rerank,
                          filter, extra, stream=True)
        return StreamCall(Call("POST", "/v1/chat/completions", json=body), ChatStreamDecoder)

    # --- the runners' own APIs ----------------------------------------------------------------------

    @operation
    def embed(self, texts: str | Sequence[str], *, dimensions: int | None = None) -> Operation[Embeddings]:
        """Embeddings of texts as they are (no query instruction), in input order."""
        body: dict[str, Any] = {"input": [texts] if isinstance(texts, str) else list(texts),
                                "encoding_format": "float"}
        if dimensions is not None:
            body["dimensions"] = dimensions
        payload = yield from self._json(Call("POST", "/v1/embeddings", json=body))
        data = sorted(payload["data"], key=lambda d: d["index"])
        return Embeddings(model=payload.get("model", ""), vectors=[d["embedding"] for d in data],
                          usage=payload.get("usage"))

    @operation
    def rerank(self, query: str, documents: Sequence[str], *, top_n: int | None = None,
               instruction: str | None = None) -> Operation[list[RerankResult]]:
        """Documents scored against the query, best first."""
        # return_documents: /v1/rerank follows Cohere's default (false); RerankResult carries each document's text
        body: dict[str, Any] = {"query": query, "documents": list(documents), "return_documents": True}
        if top_n is not None:
            body["top_n"] = top_n
        if instruction is not None:
            body["instruction"] = instruction
        payload = yield from self._json(Call("POST", "/v1/rerank", json=body))
        return [RerankResult(index=r["index"], relevance_score=r["relevance_score"],
                             text=(r.get("document") or {}).get("text")) for r in payload["results"]]


def _chat_body(messages: str | Sequence[Message], collections: Sequence[str] | None, image: ImageArg | None,
               model: str | None, max_tokens: int | None, temperature: float | None, context_top_k: int | None,
               rerank: bool | None, filter: Mapping[str, Any] | None, extra: Mapping[str, Any] | None, *,
               stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {**dict(extra or {}), "messages": chat_messages(messages, image), "stream": stream}
    for key, value in {"model": model, "max_tokens": max_tokens, "temperature": temperature}.items():
        if value is not None:
            body[key] = value
    if collections:
        ext: dict[str, Any] = {"collections": list(collections)}
        if context_top_k is not None:
            ext["top_k"] = context_top_k
        if rerank is not None:
            ext["rerank"] = rerank
        if filter is not None:
            ext["filter"] = dict(filter)
        body["ragserve"] = ext
    elif context_top_k is not None or rerank is not None or filter is not None:
        raise ValueError("context_top_k, rerank and filter apply to grounded chat: pass collections")
    return body
