"""LangChain's own standard retriever suite (``langchain-tests``' ``RetrieversIntegrationTests``) against the live
app, once with LangChain's ``k`` and once with ragserve's ``top_k`` as the count's name (constructor and call).

The suite makes retrievers without closing them; the constructor here records each, and they are closed after
the test, so no connection is left to the garbage collector. One app serves the module: the suite's claims are
about the adapter, and each test only reads the seeded collection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from service.client import Client
from service.client.langchain import RagserveContextRetriever, RagserveRetriever
from service.config import Settings
from tests.service.client.seed import seed
from tests.support.app import API_KEY
from tests.support.runners import RunnerURLs
from tests.support.server import live_server


@pytest.fixture(scope="module")
def seeded_url(runners: RunnerURLs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = Settings(profile="minilm", data_dir=tmp_path_factory.mktemp("standard"), api_keys=[API_KEY],
                        runners={"embed_url": runners.minilm_embed}, qdrant={"edge_process": False})
    with live_server(settings) as url, Client(url, API_KEY) as rs:
        seed(rs)  # three documents: the suite asks for 1 and 3
        yield url


class _Suite(RetrieversIntegrationTests):
    _made: list[RagserveRetriever]
    _url: str

    @pytest.fixture(autouse=True)
    def _live(self, seeded_url: str) -> Iterator[None]:
        self._url, self._made = seeded_url, []
        yield
        for retriever in self._made:
            retriever.close()

    @property
    def retriever_constructor(self) -> Callable[..., RagserveRetriever]:  # type: ignore[override]
        def make(**params: Any) -> RagserveRetriever:
            retriever = RagserveRetriever(**params)
            self._made.append(retriever)
            return retriever

        return make

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"collection": "kb", "base_url": self._url, "api_key": API_KEY}

    @property
    def retriever_query_example(self) -> str:
        return "how is espresso made?"


class TestWithK(_Suite):
    @property
    def num_results_arg_name(self) -> str:
        return "k"


class TestWithTopK(_Suite):
    @property
    def num_results_arg_name(self) -> str:
        return "top_k"



class _ContextSuite(_Suite):
    """The same suite for the context retriever: ``k`` is the most passages of a 1,000-token context."""

    @property
    def retriever_constructor(self) -> Callable[..., RagserveRetriever]:  # type: ignore[override]
        def make(**params: Any) -> RagserveRetriever:
            retriever = RagserveContextRetriever(**params)
            self._made.append(retriever)
            return retriever

        return make


class TestContextWithK(_ContextSuite):
    @property
    def num_results_arg_name(self) -> str:
        return "k"


class TestContextWithTopK(_ContextSuite):
    @property
    def num_results_arg_name(self) -> str:
        return "top_k"
