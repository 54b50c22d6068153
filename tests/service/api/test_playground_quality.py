"""The playground's thumbs on a hit and its Quality view, used as a person would in headless Chromium against the
real API on the minilm stack (the real runner, the embedded store, the query log's own SQLite file).

A thumb's rating is held to what the server kept (GET /v1/querylog); the Quality view to GET /v1/quality for
the same window and to searches the test made and counted itself. Every wait is on the page's DOM.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from service.auth.keys import sha256_hex
from service.config import Settings
from service.config.keys import ApiKeyEntry
from tests.support.app import API_KEY
from tests.support.browser import artifacts_dir, chromium
from tests.support.server import live_server

if TYPE_CHECKING:  # playwright itself is imported by tests.support.browser, which skips without it
    from playwright.async_api import Browser, ConsoleMessage, Locator, Page, Response

PATIENCE_S = 300  # a liveness bound, not a timing claim: the runners are shared and the machine may be slow
TENANT_KEY = "tenant-key-0123456789abcdef"
DOCS = [
    {"id": "router", "text": "To reset the router, hold the reset button for ten seconds."},
    {"id": "modem", "text": "Restart the modem when the router shows no internet light."},
    {"id": "fox", "text": "The quick brown fox jumps over the lazy dog."},
]
NOTES = [{"id": "tea", "text": "Green tea steeps for two minutes at eighty degrees."}]
QUERY = "how do I reset the router"
NOBODY = {"team": "nobody"}  # no document has this field: the search it filters has no hits


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return artifacts_dir(tmp_path_factory, "playground")


def _console_error(errors: list[str], message: ConsoleMessage) -> None:
    # Chromium notes every error answer of a fetch ("Failed to load resource"); the page shows those itself.
    if message.type == "error" and not message.text.startswith("Failed to load resource"):
        errors.append(message.text)


async def _open(browser: Browser, base: str, errors: list[str]) -> Page:
    """A fresh page at /ui with the admin key pasted; uncaught script errors and console errors (a style or
    script the Content-Security-Policy refused among them) go to ``errors``."""
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: _console_error(errors, m))
    page.set_default_timeout(PATIENCE_S * 1000)
    await page.goto(f"{base}/ui/")
    await page.fill("#api-key", API_KEY)
    await page.press("#api-key", "Enter")
    await page.wait_for_function("() => /^\\d+ collections?$/.test(document.querySelector('#status').textContent)")
    return page


async def _fill(api: httpx.AsyncClient, name: str, docs: list[dict[str, Any]]) -> None:
    assert (await api.post("/v1/collections", json={"name": name})).status_code == 201
    r = await api.post(f"/v1/collections/{name}/documents", json={"documents": docs})
    assert r.status_code == 200, r.text


async def _page_search(page: Page) -> dict[str, Any]:
    """The page's dense search for QUERY in kb, drawn: the API's answer."""
    await page.select_option("#collection", "kb")
    await page.fill("#query", QUERY)
    await page.select_option("#mode", "dense")
    async with page.expect_response(lambda r: r.url.endswith("/v1/search")) as answer:
        await page.click("#search-button")
    response = await answer.value
    assert response.status == 200, await response.text()
    result: dict[str, Any] = await response.json()
    assert result["search_id"] and len(result["hits"]) == 3
    await page.wait_for_function("n => document.querySelectorAll('#hits > li.hit').length === n",
                                 arg=len(result["hits"]))
    return result


async def _rate(page: Page, hit: Locator, rating: int) -> Response:
    """Click the hit's thumb for ``rating``: the answer to the POST /v1/feedback it sent."""
    async with page.expect_response(lambda r: r.url.endswith("/v1/feedback")) as answer:
        await hit.locator(f'button.thumb[data-rating="{rating}"]').click()
    return await answer.value


async def _thumbs(hit: Locator) -> dict[str, Any]:
    return await hit.locator(".feedback").evaluate("""f => ({
        rated: f.dataset.rated ?? null,
        pressed: Object.fromEntries([...f.querySelectorAll('button.thumb')]
            .map(b => [b.dataset.rating, b.getAttribute('aria-pressed')])),
        note: f.querySelector('.feedback-note').textContent,
    })""")


async def _kept(api: httpx.AsyncClient, search_id: str) -> list[dict[str, Any]]:
    """The feedback the server kept on ``search_id``, read back through the query log with the admin key; each
    with ``by_searcher``: given with the key that searched."""
    log = await api.get("/v1/querylog")
    assert log.status_code == 200, log.text
    (row,) = [r for r in log.json()["rows"] if r["search_id"] == search_id]
    return [{"by_searcher": f["key_id"] == row["key_id"],
             **{k: f[k] for k in ("collection", "chunk_id", "doc_id", "rating", "comment")}} for f in row["feedback"]]


async def test_thumbs_rate_a_hit_and_the_other_thumb_replaces_the_rating(
    minilm_settings: Settings, browser: Browser, shots: Path
) -> None:
    minilm_settings.query_log.enabled = True
    minilm_settings.api_key_hashes = [ApiKeyEntry(id="tenant-a", sha256=sha256_hex(TENANT_KEY), scopes=["read"],
                                                  tenant={"field": "org", "value": "a"})]
    with live_server(minilm_settings) as base:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=PATIENCE_S) as api:
            await _fill(api, "kb", DOCS)
            errors: list[str] = []
            page = await _open(browser, base, errors)
            result = await _page_search(page)
            hits = page.locator("#hits > li.hit")
            second, rated = hits.nth(1), result["hits"][1]
            assert await _thumbs(second) == {"rated": None, "pressed": {"1": "false", "-1": "false"}, "note": ""}

            up = await _rate(page, second, 1)
            assert up.status == 200, await up.text()
            assert json.loads(up.request.post_data or "{}") == {
                "search_id": result["search_id"], "chunk_id": rated["id"], "rating": 1}
            assert await up.request.header_value("authorization") == f"Bearer {API_KEY}"
            assert (await up.json())["stored"] is True
            await page.wait_for_function("() => document.querySelectorAll('#hits > li.hit')[1]"
                                         ".querySelector('.feedback').dataset.rated === '1'")
            assert await _thumbs(second) == {"rated": "1", "pressed": {"1": "true", "-1": "false"}, "note": "saved"}
            kept = {"by_searcher": True, "collection": "kb", "chunk_id": rated["id"], "doc_id": rated["doc_id"],
                    "comment": None}
            assert await _kept(api, result["search_id"]) == [{**kept, "rating": 1}]

            down = await _rate(page, second, -1)
            assert down.status == 200, await down.text()
            assert json.loads(down.request.post_data or "{}") == {
                "search_id": result["search_id"], "chunk_id": rated["id"], "rating": -1}
            await page.wait_for_function("() => document.querySelectorAll('#hits > li.hit')[1]"
                                         ".querySelector('.feedback').dataset.rated === '-1'")
            assert await _thumbs(second) == {"rated": "-1", "pressed": {"1": "false", "-1": "true"}, "note": "saved"}
            assert await _kept(api, result["search_id"]) == [{**kept, "rating": -1}]  # replaced: still one
            await page.screenshot(path=shots / "thumbs.png", full_page=True)

            # An error answer is shown as every other one is: another tenant's key may not rate this search.
            await page.fill("#api-key", TENANT_KEY)
            await page.press("#api-key", "Enter")
            # The status line said "3 hits …" since the search: "1 collection" is the new key's listing done.
            await page.wait_for_function("() => document.querySelector('#status').textContent === '1 collection'")
            refused = await _rate(page, hits.nth(0), 1)
            assert refused.status == 403
            await page.wait_for_function("() => !document.querySelector('#error').hidden")
            assert await page.text_content("#error") == \
                "403 search_of_another_tenant: this key may not rate another tenant's search"
            assert await _thumbs(hits.nth(0)) == {"rated": None, "pressed": {"1": "false", "-1": "false"}, "note": ""}
            assert await _thumbs(second) == {"rated": "-1", "pressed": {"1": "false", "-1": "true"}, "note": "saved"}
            assert await _kept(api, result["search_id"]) == [{**kept, "rating": -1}]
            assert errors == []
            await page.close()


def _bound(x: float | None) -> str:
    """A bucket bound as the page's JavaScript writes a number (String(x)): 1 not 1.0, 0.35 as is."""
    assert x is not None
    return f"{x:g}"


def _bars(buckets: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(label, count) of each bucket the page must draw: the empty ones below the lowest and above the highest
    score left out."""
    full = [i for i, b in enumerate(buckets) if b["count"]]
    rows = []
    for i in range(full[0], full[-1] + 1):
        le, below = buckets[i]["le"], buckets[i - 1]["le"] if i else None
        label = f"> {_bound(below)}" if le is None else f"≤ {_bound(le)}" if i == 0 else f"{_bound(below)}–{_bound(le)}"
        rows.append((label, str(buckets[i]["count"])))
    return rows


SHOWN = """() => Object.fromEntries([...document.querySelectorAll('#quality-histograms .histogram')].map(h => [
    h.dataset.kind,
    [...h.querySelectorAll('li')].map(li => {
        const bar = li.querySelector('.fill').getBoundingClientRect().width;
        const track = li.querySelector('.track').getBoundingClientRect().width;
        return [li.querySelector('.bucket').textContent, li.querySelector('.count').textContent, bar / track];
    }),
]))"""


async def _quality(page: Page, click: str, searches: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Click ``click``; wait for the view to show ``searches``: the URL asked, its answer, and the bars drawn."""
    async with page.expect_response(lambda r: "/v1/quality?" in r.url) as answer:
        await page.click(click)
    response = await answer.value
    assert response.status == 200, await response.text()
    await page.wait_for_function("n => document.querySelector('#quality-searches').textContent === n", arg=searches)
    return response.url, await response.json(), await page.evaluate(SHOWN)


def _check_bars(shown: dict[str, Any], summary: dict[str, Any]) -> None:
    assert list(shown) == list(summary["top_score"])
    for kind, buckets in summary["top_score"].items():
        assert [(label, count) for label, count, _ in shown[kind]] == _bars(buckets)
        most = max(b["count"] for b in buckets)
        for _, count, share in shown[kind]:  # each bar as wide as its count's share of the fullest bucket
            assert share == pytest.approx(int(count) / most, abs=0.01)


async def test_the_quality_view_shows_searches_zero_hit_rate_and_top_scores(
    minilm_settings: Settings, browser: Browser, shots: Path
) -> None:
    with live_server(minilm_settings) as base:  # the query log is off: the view reads the searches' records
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=PATIENCE_S) as api:
            await _fill(api, "kb", DOCS)
            await _fill(api, "notes", NOTES)
            errors: list[str] = []
            page = await _open(browser, base, errors)
            result = await _page_search(page)  # search 1: kb, dense
            thumb = await _rate(page, page.locator("#hits > li.hit").nth(0), 1)
            assert thumb.status == 200 and (await thumb.json())["stored"] is False
            await page.wait_for_function("() => document.querySelector('#hits .feedback').dataset.rated === '1'")
            assert await _thumbs(page.locator("#hits > li.hit").nth(0)) == {
                "rated": "1", "pressed": {"1": "true", "-1": "false"}, "note": "not stored: query log off"}

            url, summary, shown = await _quality(page, "#tab-quality", "1")
            assert url == f"{base}/v1/quality?hours=24"
            assert await page.text_content("#quality-zero-rate") == "0.0% (0 of 1)"
            assert await page.text_content("#quality-scope") == "every collection this key may see · the last 24 hours"
            assert summary["searches"] == 1 and list(summary["top_score"]) == ["dense"]
            _check_bars(shown, summary)

            # Three more, made here: one that matches nothing in kb, a sparse one in kb, a dense one in notes.
            for body, found in (({"collection": "kb", "query": QUERY, "mode": "dense", "filter": NOBODY}, 0),
                                ({"collection": "kb", "query": QUERY, "mode": "sparse"}, 2),
                                ({"collection": "notes", "query": "tea", "mode": "dense"}, 1)):
                r = await api.post("/v1/search", json=body)
                assert r.status_code == 200 and len(r.json()["hits"]) == found, r.text
            url, summary, shown = await _quality(page, "#quality-refresh", "4")
            assert await page.text_content("#quality-zero-rate") == "25.0% (1 of 4)"
            assert summary == (await api.get("/v1/quality", params={"hours": 24})).json()
            assert {k: sum(b["count"] for b in v) for k, v in summary["top_score"].items()} == {"dense": 2, "sparse": 1}
            _check_bars(shown, summary)
            await page.screenshot(path=shots / "quality.png", full_page=True)

            # Only the selected collection: kb's three searches, one of them without hits.
            url, summary, shown = await _quality(page, "#quality-only", "3")
            assert url == f"{base}/v1/quality?hours=24&collection=kb"
            assert await page.text_content("#quality-zero-rate") == "33.3% (1 of 3)"
            assert await page.text_content("#quality-scope") == "kb · the last 24 hours"
            _check_bars(shown, summary)
            assert result["search_id"]
            assert errors == []
            await page.close()
