"""Logging for ``ragserve serve`` and ``ragserve worker``: one handler on the root logger (uvicorn's loggers
and ours propagate to it), text by default or one JSON object per line (``RAGSERVE_LOG_FORMAT=json``), each
line carrying the request id (``-`` outside a request), the key id and, when tracing, the trace id."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any, Literal, TextIO

from opentelemetry import trace

from service.observability.context import current

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
_OURS = {"request_id", "key_id", "trace_id", "span_id"}
QUIET_LIBRARIES = ("httpx", "mcp.server.streamable_http_manager")
"""Loggers whose INFO lines tell an operator nothing: httpx logs every call to a runner ("HTTP Request:
POST .../v1/embeddings 200", which ragserve's access line and stage timings already say), the MCP SDK its
session manager starting and stopping. Below DEBUG they log warnings and errors only."""


class ContextFilter(logging.Filter):
    """Adds ``request_id``, ``key_id``, ``trace_id`` and ``span_id`` to every record it sees."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = current()
        record.request_id = ctx.request_id if ctx is not None else "-"
        record.key_id = ctx.key_id if ctx is not None else None
        span = trace.get_current_span().get_span_context()
        record.trace_id = format(span.trace_id, "032x") if span.is_valid else None
        record.span_id = format(span.span_id, "016x") if span.is_valid else None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the context fields, ``extra=`` fields, and
    the formatted exception when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("request_id", "key_id", "trace_id", "span_id"):
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in _OURS:
                out[key] = value if isinstance(value, (str, int, float, bool)) or value is None else repr(value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(fmt: Literal["text", "json"] = "text", level: str = "INFO",
                      stream: TextIO | None = None) -> logging.Handler:
    """Replace the root logger's handlers with one that writes ``fmt`` to ``stream`` (stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    quiet = logging.NOTSET if root.level <= logging.DEBUG else logging.WARNING
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(quiet)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):  # theirs propagate to ours
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    return handler
