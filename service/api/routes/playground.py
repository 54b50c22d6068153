"""The playground at ``/ui``: one hand-written HTML page, its script and its stylesheet, from package data.

The page itself needs no key (it holds nothing); every data call it makes goes to the ``/v1`` routes with
the key the user pastes, so the API's own auth guards the data. The Content-Security-Policy allows only
this origin's script and style files (no inline script, no eval, no other origin), and ``connect-src
'self'``: hit text, answers and file names are untrusted, and the page renders them as text nodes.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse, Response

router = APIRouter(tags=["playground"], include_in_schema=False)

ASSETS = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "app.css": "text/css; charset=utf-8"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-cache"}


@cache
def _asset(name: str) -> bytes:
    return resources.files("service.api").joinpath("static", "playground", name).read_bytes()


@router.get("/ui", name="playground_redirect")
async def playground_redirect(request: Request) -> RedirectResponse:
    # The page refers to its files relatively, so it must be served from a folder URL (behind a proxy's
    # root path too: url_for keeps it).
    return RedirectResponse(str(request.url_for("playground_index")), status_code=307)


@router.get("/ui/", name="playground_index")
async def playground_index() -> Response:
    return await playground_asset("index.html")


@router.get("/ui/{name}", name="playground_asset")
async def playground_asset(name: str) -> Response:
    if name not in ASSETS:
        raise HTTPException(status_code=404, detail="Not Found")
    return Response(_asset(name), media_type=ASSETS[name], headers=HEADERS)
