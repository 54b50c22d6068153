"""Refuse request bodies over the configured size before reading them."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.json_body import BodyError


class BodySizeLimit:
    """Answers 413 for a Content-Length over ``max_bytes``, and stops a body that streams past it."""

    def __init__(self, app: ASGIApp, max_bytes: int, upload_max_bytes: int | None = None,
                 import_max_bytes: int | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.upload_max_bytes = upload_max_bytes or max_bytes
        self.import_max_bytes = import_max_bytes or max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        limit = self.max_bytes
        if scope["path"].endswith("/ingest") and headers.get(b"content-type", b"").startswith(b"multipart/"):
            limit = self.upload_max_bytes
        elif scope["path"].endswith("/import") and scope["method"] == "POST":  # streamed into the store as it comes
            limit = self.import_max_bytes
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await self._refuse(send, limit)
            return
        received = 0

        async def limited_receive():  # type: ignore[no-untyped-def]
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge(limit)
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _TooLarge:
            await self._refuse(send, limit)

    async def _refuse(self, send: Send, limit: int) -> None:
        body = json.dumps({"error": {
            "type": "invalid_request", "code": "request_too_large",
            "message": f"request body over {limit} bytes",
        }}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(BodyError):
    """Raised from ``receive`` while the app reads the body. A ``BodyError`` so that whoever reads it
    (FastAPI's body reader, a form parser) lets it through to the error handlers, which answer 413; one
    that escapes them is answered here."""

    def __init__(self, limit: int) -> None:
        super().__init__("request_too_large", f"request body over {limit} bytes", status_code=413)
