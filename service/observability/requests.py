"""Per-request context and the request span, as two small ASGI middlewares.

:class:`RequestContextMiddleware` (outermost) takes the caller's ``X-Request-ID`` or makes one, binds it for
the logs, echoes it as the ``X-Request-ID`` response header, and logs one access line per request.
:class:`TracingMiddleware` opens the request's server span (continuing a caller's W3C ``traceparent``) that
every stage span of the request is parented under, named by the route template once routing has run.
"""

from __future__ import annotations

import logging
import time

from opentelemetry import propagate, trace
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.observability.context import RequestContext, accept_request_id, bind, unbind
from service.observability.tracing import tracer

REQUEST_ID_HEADER = b"x-request-id"
access_log = logging.getLogger("ragserve.access")


class RequestContextMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        offered = dict(scope.get("headers") or []).get(REQUEST_ID_HEADER)
        context = RequestContext(accept_request_id(offered.decode("latin-1") if offered else None))
        token = bind(context)
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != REQUEST_ID_HEADER]
                message = {**message, "headers": [*headers, (REQUEST_ID_HEADER, context.request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            route = getattr(scope.get("route"), "path", scope["path"])
            access_log.info("%s %s %d %.1fms", scope["method"], route, status,
                            (time.perf_counter() - started) * 1000)
            unbind(token)


class TracingMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or []}
        method = scope["method"]
        span = tracer.start_span(method, context=propagate.extract(carrier), kind=trace.SpanKind.SERVER,
                                 attributes={"http.request.method": method, "url.path": scope["path"]})
        with trace.use_span(span, end_on_exit=True):  # start_as_current_span's own steps (tracing.stage)

            async def send_traced(message: Message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                    if message["status"] >= 500:
                        span.set_status(trace.StatusCode.ERROR)
                await send(message)

            try:
                await self.app(scope, receive, send_traced)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if route is not None:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
