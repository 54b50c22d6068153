"""Streamed responses whose iterator is closed however the response ends.

Starlette's ``StreamingResponse`` stops on a client that has gone (a ``http.disconnect`` while it streams, or a send
that raises), but when that happens during a send it leaves the body iterator suspended at its ``yield``: the
iterator's own cleanup (for a relay, closing the stream toward the runner, which is what makes vLLM abort the
generation) then waits for the garbage collector, which may be long after the runner has generated every token.
:class:`RelayResponse` closes the iterator as soon as the response is over.
"""

from __future__ import annotations

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class RelayResponse(StreamingResponse):
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
