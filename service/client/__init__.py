"""The Python client for ragserve: ``Client`` (blocking) and ``AsyncClient`` (asyncio), one implementation.

A chat app installs it alone, as the ``ragserve-client`` distribution built from this folder (pyproject.toml
here) and imported as ``ragserve_client``; ragserve itself imports the same files as ``service.client``. So
every import in this package is relative, and none leaves it (tests/test_layers.py).

::

    from ragserve_client import Client   # in ragserve's own code: from service.client import Client

    with Client("http://127.0.0.1:8000", api_key=KEY) as rs:
        rs.ensure_collection("kb")
        job = rs.ingest_path("kb", "./docs", progress=lambda job: print(job.progress.fraction))
        for hit in rs.search("kb", "how do I rotate keys?", top_k=5).hits:
            print(hit.score, hit.doc_id, hit.text)
        with rs.chat_stream("How do I rotate keys?", collections=["kb"]) as answer:
            for delta in answer:
                print(delta, end="")
        print(answer.citations)

Errors are the typed exceptions of :mod:`.errors`.
"""

from .aio import AsyncClient
from .errors import (
    APIError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RagserveClientError,
    RateLimited,
    ServerError,
    Timeout,
    Unauthorized,
    Unavailable,
)
from .inputs import Document, data_url
from .models import (
    ChatResult,
    Citation,
    Collection,
    ContextPassage,
    ContextResult,
    DeleteResult,
    DroppedCandidate,
    Embeddings,
    FeedbackResult,
    ImageInfo,
    ImportResult,
    Job,
    JobCounts,
    JobProgress,
    RerankResult,
    Retrieval,
    SearchHit,
    SearchResult,
    Snapshot,
    SnapshotCollection,
    SnapshotListing,
    UnreadableSnapshot,
    UpsertResult,
)
from .options import IngestOptions
from .streaming import AsyncChatStream, ChatStream
from .sync import Client
from .version import VERSION as __version__

__all__ = [
    "APIError", "AsyncChatStream", "AsyncClient", "ChatResult", "ChatStream", "Citation", "Client", "Collection",
    "Conflict", "ConnectionFailed", "DeleteResult", "Document", "Embeddings", "FeedbackResult", "Forbidden",
    "ImageInfo", "ImportResult",
    "IngestOptions", "InvalidRequest", "Job", "JobCounts", "JobProgress", "NotFound", "PayloadTooLarge",
    "RagserveClientError", "RateLimited", "RerankResult", "Retrieval", "SearchHit", "SearchResult", "ContextPassage",
    "ContextResult", "DroppedCandidate", "ServerError", "Snapshot",
    "SnapshotCollection", "SnapshotListing", "Timeout",
    "Unauthorized", "Unavailable", "UnreadableSnapshot", "UpsertResult", "__version__", "data_url",
]
