from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from service.observability.logs import configure_logging

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="session")
def _provider() -> TracerProvider:
    """The SDK provider with an in-memory exporter, installed once (OpenTelemetry allows one per process)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider, "another tracer provider was installed first"
    return provider


@pytest.fixture
def spans(_provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """Logging configured as ``ragserve serve`` does it, into a buffer (JSON lines); restored afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    configure_logging("json", "INFO", stream=stream)
    yield stream
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
