"""LangChain's own standard retriever suite (langchain-tests' ``RetrieversIntegrationTests``) on the installed
adapters (the search retriever and the context retriever), with the current langchain-core, once with LangChain's
``k`` and once with ragserve's ``top_k``.
Retrievers the suite makes are recorded and closed after each test, so none is left to the garbage collector."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import Service
from langchain_tests.integration_tests import RetrieversIntegrationTests
from ragserve_client.langchain import RagserveContextRetriever, RagserveRetriever


class _Suite(RetrieversIntegrationTests):
    _made: list[RagserveRetriever]
    _service: Service

    @pytest.fixture(autouse=True)
    def _live(self, service: Service) -> Iterator[None]:
        self._service, self._made = service, []
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
        return {"collection": self._service.collection, "base_url": self._service.url,
                "api_key": self._service.api_key}

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
    """The same suite for the context retriever: ``k`` is the most passages of its context."""

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
