"""OpenTelemetry traces: a span per request (service.observability.requests) and per stage (embed, store,
rerank, generate, image_query, and each indexing batch), exported over OTLP/HTTP when configured.

Code asks the module-level ``tracer`` (the API's proxy) for spans; until :func:`configure_tracing` installs
an SDK provider they are non-recording and cost next to nothing. Attributes: ``ragserve.collection``,
``ragserve.mode``, counts (``ragserve.candidates``, ``ragserve.hits``, ``ragserve.documents``...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from service.config import OtelSettings

tracer = trace.get_tracer("ragserve")
STANDARD_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def stage(name: str, **attributes: Any) -> AbstractContextManager[Span]:
    """A span for one pipeline stage, a child of whatever span is current (the request's, a batch's), ended
    when the block is left (an exception recorded on it, as ``start_as_current_span`` does).

    What the SDK's ``start_as_current_span`` does (``start_span``, then ``use_span``), without its two
    generator-based context managers around it (the proxy tracer's and the tracer's): a search opens two
    stages and the request's span, and each of those layers had a measurable cost per search (issue 20)."""
    attrs = {f"ragserve.{k}": v for k, v in attributes.items() if v is not None}
    return trace.use_span(tracer.start_span(name, attributes=attrs), end_on_exit=True)


def otlp_exporter(settings: OtelSettings, environ: Mapping[str, str] = os.environ) -> SpanExporter | None:
    """The OTLP/HTTP exporter the settings (or the standard OTEL_* variables) ask for; None: no export."""
    if settings.endpoint is None and not any(environ.get(name) for name in STANDARD_ENDPOINTS):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if settings.endpoint is not None:
        return OTLPSpanExporter(endpoint=settings.endpoint.rstrip("/") + "/v1/traces")
    return OTLPSpanExporter()  # reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, headers, timeout itself


def configure_tracing(settings: OtelSettings, environ: Mapping[str, str] = os.environ) -> TracerProvider | None:
    """Install the SDK provider with a batching OTLP exporter, once per process (serve, worker)."""
    exporter = otlp_exporter(settings, environ)
    if exporter is None:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    resource = Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME") or settings.service_name})
    provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider
