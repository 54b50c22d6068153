"""``RAGSERVE_OTEL__*``: tracing."""

from __future__ import annotations

from pydantic import BaseModel, Field


class OtelSettings(BaseModel):
    """OpenTelemetry traces: a span per request and per stage, sent over OTLP/HTTP when an endpoint is set
    here or in the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``."""

    endpoint: str | None = Field(
        None, description="OTLP/HTTP collector base URL, e.g. http://otel-collector:4318 (spans go to /v1/traces)."
    )
    service_name: str = Field("ragserve", description="service.name of the spans (OTEL_SERVICE_NAME wins).")
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0, description="Share of new traces recorded (parent-based).")
