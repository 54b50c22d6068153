"""The installed client, alone: it imports nothing of the server, and searches the live service."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import sys

import pytest
import ragserve_client
from conftest import DOCS, QUERY, Service
from ragserve_client import AsyncClient, Client, FeedbackResult, NotFound, SearchResult


def test_the_client_is_the_installed_distribution_without_the_server() -> None:
    for adapter in ("ragserve_client.langchain", "ragserve_client.llamaindex"):
        importlib.import_module(adapter)
    assert importlib.metadata.version("ragserve-client") == ragserve_client.__version__
    assert "site-packages" in (ragserve_client.__file__ or "")
    assert importlib.util.find_spec("service") is None and importlib.util.find_spec("indexer") is None
    assert not [name for name in sys.modules if name.split(".")[0] in ("service", "indexer")]


def test_search_returns_the_seeded_documents(service: Service) -> None:
    with Client(service.url, service.api_key) as rs:
        result = rs.search(service.collection, QUERY, top_k=3)
    assert isinstance(result, SearchResult)
    assert result.hits[0].doc_id == "espresso" and result.hits[0].text == DOCS[0].text
    assert {hit.doc_id for hit in result.hits} == {doc.id for doc in DOCS}
    assert result.hits[0].metadata["tag"] == "coffee"


async def test_async_search_returns_what_the_blocking_one_does(service: Service) -> None:
    async with AsyncClient(service.url, service.api_key) as rs:
        result = await rs.search(service.collection, QUERY, top_k=2, filter={"tag": "coffee"})
    assert [hit.doc_id for hit in result.hits] == ["espresso"]


def test_a_search_id_rates_its_top_hit(service: Service) -> None:
    with Client(service.url, service.api_key) as rs:
        result = rs.search(service.collection, QUERY, top_k=1)
        (top,) = result.hits
        rated = rs.feedback(result.search_id or "", chunk_id=top.id, rating=3)
        with pytest.raises(NotFound) as unknown:
            rs.feedback("s_" + "0" * 32, chunk_id=top.id, rating=3)
    assert result.search_id is not None and re.fullmatch(r"s_[0-9a-f]{32}", result.search_id)
    assert rated == FeedbackResult(search_id=result.search_id, collection=service.collection, chunk_id=top.id,
                                   doc_id="espresso", rating=3, stored=rated.stored)  # stored: the deployment's log
    assert (unknown.value.status_code, unknown.value.code) == (404, "search_not_found")
