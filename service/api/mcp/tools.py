"""The MCP tools, on the ``mcp`` SDK's ``MCPServer``: ``search``, ``context`` and ``list_collections``.

They run in the API process and call the same use cases the HTTP routes do (:class:`service.search.retrieval.Retrieval`,
the store), with the
request's lifespan services (the HTTP request that carried the MCP message holds them). A refusal becomes a
tool error whose text starts with ragserve's error code, e.g. ``collection_not_found: ...``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from service import __version__
from service.api.schemas.common import FILTER_SYNTAX, filter_spec
from service.api.schemas.context import ContextRequest
from service.api.schemas.search import SearchRequest
from service.api.state import Services
from service.auth.principal import Principal
from service.context import service as use_case
from service.errors import RagserveError
from service.search.query_cache import partition_of
from service.search.retrieval import RetrievalRequest

ModelT = TypeVar("ModelT", bound=BaseModel)

INSTRUCTIONS = (
    "ragserve retrieves passages from indexed document collections. Call list_collections to see what is "
    "indexed, then search a collection with the user's question; cite hits by doc_id."
)


SEARCH_ID = "This search's id: POST /v1/feedback with it rates a hit (doc_id) as useful or wrong."


class Hit(BaseModel):
    rank: int
    doc_id: str
    chunk_index: int
    text: str
    score: float = Field(description="The score hits are ordered by (the reranker's when reranked).")
    vector_score: float
    rerank_score: float | None = None
    metadata: dict[str, Any]
    location: dict[str, Any] | None = None


class SearchOutput(BaseModel):
    search_id: str | None = Field(None, description=SEARCH_ID)
    collection: str
    query: str
    mode: str
    reranked: bool
    hits: list[Hit]


class Passage(BaseModel):
    number: int = Field(description="The passage's [n] in `context`: cite it so.")
    collection: str
    doc_id: str
    chunk_indexes: list[int]
    text: str
    location: dict[str, Any] | None = Field(None, description="Offsets, page and headings in the document.")
    score: float


class ContextOutput(BaseModel):
    search_id: str | None = Field(None, description=SEARCH_ID)
    context: str = Field(description="The numbered passages, ready to put in a prompt.")
    tokens: int
    tokenizer: str
    query_used: str
    passages: list[Passage]


class CollectionSummary(BaseModel):
    name: str
    points: int = Field(description="Stored chunks.")
    dimensions: int
    model: str | None


class CollectionsOutput(BaseModel):
    collections: list[CollectionSummary]


def _services(ctx: Context) -> Services:
    request = ctx.request_context.request
    services: Services = request.state.services  # type: ignore[union-attr]
    return services


def _principal(ctx: Context) -> Principal:
    """The key the /mcp endpoint authenticated for this request."""
    request = ctx.request_context.request
    principal: Principal = request.state.principal  # type: ignore[union-attr]
    return principal


def _tool_error(exc: RagserveError) -> ToolError:
    where = f" (param {exc.param})" if exc.param else ""
    return ToolError(f"{exc.code}: {exc.message}{where}")


@contextmanager
def _root_logging_kept() -> Iterator[None]:
    """Undo what ``MCPServer()`` does to logging: it calls ``logging.basicConfig`` (a rich handler at INFO on
    the root logger), which takes effect wherever the root has no handler yet, as in ``ragserve demo`` or a
    program that embeds the app; every INFO line of every library (httpx's "HTTP Request: ...", the
    worker's) then reached the terminal. ragserve's processes configure logging themselves
    (:mod:`service.observability.logs`)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)


READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
"""Every tool only reads: the same call gives the same answer until the collection changes, and they reach
nothing beyond this ragserve's own collections."""

COLLECTION = "The collection to search: one of the names list_collections gives."
QUERY = "The user's question or search text, in their words."
MODE = ("How to match: dense (embedding similarity), sparse (BM25 keyword match) or hybrid (both, fused by "
        "reciprocal rank). Default: hybrid where the collection has sparse vectors, else dense.")
RERANK = ("true to rerank the candidates with the reranker, false not to. Default: on when this deployment has a "
          "reranker.")


BUDGET = "Tokens the context may hold, numbering included (counted with the deployment's tokenizer). Default 1000."
NEIGHBOURS = "Chunks before and after each chosen chunk to add to it (default: the server's, 0)."


def top_k_text(max_top_k: int) -> str:
    return f"How many hits to return: 1 to {max_top_k}. Default 5."


def build_server(*, max_top_k: int) -> MCPServer:
    """The tools' schema states this server's limits: ``max_top_k`` is ``RAGSERVE_LIMITS__MAX_TOP_K``. The
    bounds are stated, not enforced by the SDK, so a refusal still carries ragserve's code (``top_k_too_large``)."""
    with _root_logging_kept():
        server: MCPServer = MCPServer("ragserve", version=__version__, instructions=INSTRUCTIONS)
    server.tool(description="Search a ragserve collection: the passages that best answer the query, ranked, "
                            "with their text, scores, metadata and location in the document.",
                annotations=READ_ONLY)(_search_tool(max_top_k))
    server.tool(description="A context for the user's question from a ragserve collection: the best passages, "
                            "merged, without near-duplicates, numbered [1]..[n] and cut to a token budget, ready "
                            "to put in a prompt; cite a passage by its number.",
                annotations=READ_ONLY)(context)
    server.tool(description="The collections ragserve holds, with their sizes.",
                annotations=READ_ONLY)(list_collections)
    return server


def _validated(model: type[ModelT], values: dict[str, Any]) -> ModelT:
    """The tool's arguments as the REST route would take them; a refusal names the first field at fault."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ToolError(f"validation_error: {'.'.join(map(str, first['loc']))}: {first['msg']}") from exc


def _search_tool(max_top_k: int) -> Callable[..., Awaitable[SearchOutput]]:
    """The search tool, its ``top_k`` described with this server's limit."""

    async def search(
        collection: Annotated[str, Field(description=COLLECTION)],
        query: Annotated[str, Field(description=QUERY)],
        ctx: Context,
        top_k: int = 5,  # described below: the text names this server's limit
        filter: Annotated[dict[str, Any] | None, Field(description=f"{FILTER_SYNTAX} Omit for no filter.")] = None,
        mode: Annotated[Literal["dense", "sparse", "hybrid"] | None, Field(description=MODE)] = None,
        rerank: Annotated[bool | None, Field(description=RERANK)] = None,
    ) -> SearchOutput:
        body = _validated(SearchRequest, {
            "collection": collection, "query": query, "top_k": top_k, "filter": filter, "mode": mode,
            "rerank": None if rerank is None else {"enabled": rerank}})
        try:
            principal = _principal(ctx)
            principal.check_collection(body.collection)
            retrieved = await _services(ctx).retrieval.search(
                RetrievalRequest(collection=body.collection, query=body.query or "", top_k=body.top_k,
                                 filter=filter_spec(body.filter), rerank=rerank, mode=body.mode),
                tenant=principal.tenant, cache_partition=partition_of(principal), key_id=principal.id)
        except RagserveError as exc:
            raise _tool_error(exc) from exc
        hits = [Hit(rank=i + 1, doc_id=r.hit.doc_id, chunk_index=r.hit.chunk_index, text=r.hit.text, score=r.score,
                    vector_score=r.hit.score, rerank_score=r.rerank_score, metadata=r.hit.metadata,
                    location=r.hit.location) for i, r in enumerate(retrieved.result.hits)]
        return SearchOutput(collection=body.collection, query=retrieved.query, mode=retrieved.result.mode,
                            reranked=retrieved.result.reranked, hits=hits, search_id=retrieved.search_id)

    search.__annotations__["top_k"] = Annotated[int, Field(
        description=top_k_text(max_top_k), json_schema_extra={"minimum": 1, "maximum": max_top_k})]
    return search


async def context(
    collection: Annotated[str, Field(description=COLLECTION)],
    query: Annotated[str, Field(description=QUERY)],
    ctx: Context,
    budget_tokens: Annotated[int, Field(description=BUDGET, ge=1)] = 1000,
    filter: Annotated[dict[str, Any] | None, Field(description=f"{FILTER_SYNTAX} Omit for no filter.")] = None,
    mode: Annotated[Literal["dense", "sparse", "hybrid"] | None, Field(description=MODE)] = None,
    rerank: Annotated[bool | None, Field(description=RERANK)] = None,
    neighbours: Annotated[int | None, Field(description=NEIGHBOURS, ge=0)] = None,
) -> ContextOutput:
    body = _validated(ContextRequest, {
        "collection": collection, "query": query, "budget_tokens": budget_tokens, "filter": filter,
        "mode": mode, "neighbours": neighbours})
    try:
        principal = _principal(ctx)
        principal.check_collection(collection)
        result = await _services(ctx).context.assemble(
            use_case.ContextRequest(collections=[collection], budget_tokens=body.budget_tokens, query=body.query,
                                    filter=filter_spec(body.filter), mode=body.mode, rerank=rerank,
                                    neighbours=body.neighbours),
            tenant=principal.tenant, cache_partition=partition_of(principal), key_id=principal.id)
    except RagserveError as exc:
        raise _tool_error(exc) from exc
    return ContextOutput(context=result.context, tokens=result.tokens, tokenizer=result.tokenizer,
                         query_used=result.query_used, search_id=result.search_id,
                         passages=[Passage.model_validate(p.reported()) for p in result.passages])


async def list_collections(ctx: Context) -> CollectionsOutput:
    try:
        principal = _principal(ctx)
        infos = [i for i in await _services(ctx).store.list_collections() if principal.may_reach(i.name)]
    except RagserveError as exc:
        raise _tool_error(exc) from exc
    return CollectionsOutput(collections=[
        CollectionSummary(name=i.name, points=i.points, dimensions=i.dimensions, model=i.model) for i in infos
    ])
