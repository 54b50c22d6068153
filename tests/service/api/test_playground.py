"""The playground at /ui, used as a person would in headless Chromium (Debian's, driven by Playwright)
against the real API, the real vLLM runners and the embedded store.

The assertions are on what the page shows: the hits and their order next to the API's answer to the same
request, the words inside <mark>, the scores, timings and locations printed, a job's progress reaching
"succeeded" with its counts, a streamed answer growing on screen, a citation opened by a click. The growth
of a streamed answer is driven by a scripted runner (:mod:`tests.support.scripted_runner`) that writes each
event only once the page shows the one before; that test starts no vLLM.
Screenshots go to ``$RAGSERVE_TEST_ARTIFACTS/playground`` (or pytest's temp folder); the path is printed.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest

from service.config import Settings
from tests.support import scripted_embed
from tests.support.app import API_KEY, app_client
from tests.support.browser import artifacts_dir, chromium
from tests.support.images import raster
from tests.support.scripted_runner import LIVENESS_S, ScriptedRunner, chat_chunks, scripted_settings
from tests.support.server import live_server

if TYPE_CHECKING:  # playwright itself is imported by tests.support.browser, which skips without it
    from playwright.async_api import Browser, Page

GUIDE = """# Guide

How to run the service.

## Storage

Qdrant keeps the vectors. Vectors are stored on disk, in the folder the store was given; the payload is
stored beside them.

## Keys

Rotate the API keys every month.
"""
BUDGET = "item,amount\nrent,1200\nvectors database,300\nsnacks,40\n"
UNSAFE = "Untrusted text: <script>window.__pwned = 1</script> and <b>bold</b> tags; vectors stored here.\n"
EXTRA = "# Extra\n\nOne more page about where vectors live.\n"
QUERY = "where are the vectors stored"
TERMS = ("vectors", "stored")  # the query's words less its stopwords ("where", "are", "the")
PATIENCE_S = 300  # the runners are shared by the whole test session (and its indexing jobs): a query may queue
DOCS = [
    {"id": "router", "text": "To reset the router, hold the reset button for ten seconds.",
     "metadata": {"char_start": 0, "char_end": 58, "byte_start": 0, "byte_end": 58, "page": 3}},
    {"id": "chart", "text": "The chart shows quarterly revenue rising in every region.",
     "metadata": {"location": {"char_start": 100, "char_end": 157, "page": 2, "picture": 1, "source": "vision"}}},
    {"id": "fox", "text": "The quick brown fox jumps over the lazy dog.", "metadata": {}},
]


class _ScreenshotNote:
    """Prints where the screenshots are in pytest's terminal summary (output capture would hide a print)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if any(self.path.iterdir()):
            terminalreporter.write_line(f"playground screenshots: {self.path}")


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    path = artifacts_dir(tmp_path_factory, "playground")
    if not request.config.pluginmanager.has_plugin("ragserve-playground-screenshots"):
        request.config.pluginmanager.register(_ScreenshotNote(path), "ragserve-playground-screenshots")
    return path


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as b:
        yield b


async def _open(browser: Browser, base: str, keyed: list[tuple[str, str | None]], errors: list[str]) -> Page:
    """A fresh page at /ui with the key pasted; every request it makes is noted as (url, Authorization),
    every uncaught script error in ``errors``."""
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: keyed.append((r.url, r.headers.get("authorization"))))
    page.set_default_timeout(PATIENCE_S * 1000)
    await page.goto(f"{base}/ui")
    assert page.url == f"{base}/ui/"
    assert await page.text_content("#status") == "paste an API key to start"
    await page.fill("#api-key", API_KEY)
    await page.press("#api-key", "Enter")
    await page.wait_for_function("() => document.querySelector('#status').textContent.endsWith('collections')"
                                 " || document.querySelector('#status').textContent.endsWith('collection')")
    return page


def _location_shown(loc: dict[str, Any] | None) -> dict[str, str]:
    """What the page must print for a location, key by key (the page's dd[data-key])."""
    def span(a: int, b: int) -> str:
        return str(a) if a == b else f"{a}–{b}"

    if not loc:
        return {"none": "not recorded"}
    shown: dict[str, str] = {}
    if "char_start" in loc:
        shown["chars"] = span(loc["char_start"], loc["char_end"])
    if "byte_start" in loc:
        shown["bytes"] = span(loc["byte_start"], loc["byte_end"])
    if loc.get("page") is not None:
        shown["page"] = str(loc["page"])
    if loc.get("headings"):
        shown["headings"] = " › ".join(loc["headings"])
    for key in ("slide", "sheet"):
        if loc.get(key) is not None:
            shown[key] = str(loc[key])
    if loc.get("rows"):
        shown["rows"] = span(*loc["rows"])
    if loc.get("picture") is not None:
        shown["picture"] = str(loc["picture"])
    if loc.get("source") == "ocr":
        shown["source"] = "OCR"
    if loc.get("source") == "vision":
        shown["source"] = "Description of the picture (VL model)"
    return shown


async def _shown_hits(page: Page) -> list[dict[str, Any]]:
    return await page.eval_on_selector_all("#hits > li.hit", """items => items.map(li => ({
        doc_id: li.querySelector('.doc-id').textContent,
        chunk: li.querySelector('.chunk').textContent,
        text: li.querySelector('.text').textContent,
        marks: [...li.querySelectorAll('.text mark')].map(m => m.textContent),
        scores: Object.fromEntries([...li.querySelectorAll('.scores [data-score]')]
            .map(d => [d.dataset.score, d.querySelector('dd').textContent])),
        location: Object.fromEntries([...li.querySelectorAll('.location dd')].map(d => [d.dataset.key, d.textContent])),
        elements: [...li.querySelectorAll('.text *')].map(e => e.tagName),
    }))""")


def _fixed(x: float, digits: int) -> str:
    """`x.toFixed(digits)` as the page's JavaScript writes it: the exact binary value, ties away from zero.
    Python's format rounds ties to even, so a timing of exactly 58.25 ms reads 58.2 here and 58.3 there."""
    exact = Decimal(x + 0.0)  # + 0.0: -0.0 becomes 0.0, as toFixed writes it
    return str(exact.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def _score(x: float | None) -> str:
    return "—" if x is None else _fixed(x, 4)


async def _search(page: Page, api: httpx.AsyncClient, mode: str, fusion: str, rerank: str = "") -> dict[str, Any]:
    """Run the search form as set; check the page against the API's answer to the request it sent."""
    await page.select_option("#mode", mode)
    await page.select_option("#fusion", fusion)
    await page.select_option("#rerank", rerank)
    async with page.expect_response(lambda r: r.url.endswith("/v1/search")) as answer:
        await page.click("#search-button")
    response = await answer.value
    assert response.status == 200, await response.text()
    sent = json.loads(response.request.post_data or "{}")
    assert sent.get("mode", "") == mode and sent.get("fusion", "") == fusion
    assert sent["query"] == QUERY and sent["collection"] == "kb"
    seen = await response.json()
    await page.wait_for_function("r => document.querySelector('#search-summary').textContent.startsWith(r)",
                                 arg=f"{len(seen['hits'])} hits · {seen['mode']}")
    again = await api.post("/v1/search", json=sent)  # the API, asked the same thing directly
    assert again.status_code == 200, again.text
    expected = again.json()
    shown = await _shown_hits(page)
    assert [(h["doc_id"], h["chunk"]) for h in shown] == \
        [(h["doc_id"], f"chunk {h['chunk_index']}") for h in expected["hits"]]
    assert len(shown) >= 3
    for hit, api_hit in zip(shown, expected["hits"], strict=True):
        assert hit["text"] == api_hit["text"]
        in_text = [m.group(0) for m in re.finditer(rf"\b(?:{'|'.join(TERMS)})\b", api_hit["text"], re.I)]
        assert hit["marks"] == in_text  # exactly the query's terms, every occurrence, nothing else
        assert set(hit["elements"]) <= {"MARK"}  # untrusted text became text, not elements
        scores = {"score": _score(api_hit["score"]), "vector_score": _score(api_hit["vector_score"]),
                  "rerank_score": _score(api_hit["rerank_score"])}
        if expected["mode"] == "hybrid":  # the page asks for score_details: the fused hit's dense and BM25 scores
            scores |= {"dense_score": _score(api_hit["dense_score"]), "bm25_score": _score(api_hit["bm25_score"])}
        assert hit["scores"] == scores
        assert hit["location"] == _location_shown(api_hit["location"])
    timings = await page.eval_on_selector_all(
        "#timings [data-stage]", "ds => ds.map(d => [d.dataset.stage, d.querySelector('dd').textContent])")
    assert dict(timings) == {k: f"{_fixed(v, 1)} ms" for k, v in seen["timings_ms"].items()}
    # The query's vector: embed (the runner) or embed_cache (an earlier mode asked the same query), never both.
    vector_stage = {"embed", "embed_cache"} & set(seen["timings_ms"])
    assert {"search", "total"} <= set(seen["timings_ms"]) and len(vector_stage) == (mode != "sparse"), seen
    return expected


async def test_the_page_needs_no_key_and_allows_only_its_own_files(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings, api_key=None) as client:
        moved = await client.get("/ui")
        page = await client.get("/ui/")
        script = await client.get("/ui/app.js")
        style = await client.get("/ui/app.css")
        missing = await client.get("/ui/secrets.txt")
        data = await client.get("/v1/collections")
    assert moved.status_code == 307 and moved.headers["location"] == "http://ragserve.test/ui/"
    assert page.status_code == script.status_code == style.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert script.headers["content-type"].startswith("text/javascript")
    assert style.headers["content-type"].startswith("text/css")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert re.findall(r"<script[^>]*>", page.text) == ['<script src="app.js" defer>']  # no inline script
    assert " style=" not in page.text and "http" not in page.text  # no inline style, nothing from elsewhere
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "route_not_found"
    assert data.status_code == 401  # the data still needs the key


def _patient(settings: Settings) -> Settings:
    up = settings.upstream
    up.embed_timeout_s = up.rerank_timeout_s = PATIENCE_S
    return settings


async def test_upload_in_the_jobs_tab_then_search_what_was_indexed(
    minilm_settings: Settings, browser: Browser, shots: Path
) -> None:
    _patient(minilm_settings)
    with live_server(minilm_settings, with_worker=True) as base:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=PATIENCE_S) as api:
            keyed: list[tuple[str, str | None]] = []
            errors: list[str] = []
            page = await _open(browser, base, keyed, errors)
            assert "(none yet" in await page.text_content("#collection")
            # Keyboard: from the Search tab, the right arrow selects Jobs.
            await page.focus("#tab-search")
            await page.keyboard.press("ArrowRight")
            assert await page.get_attribute("#tab-jobs", "aria-selected") == "true"
            assert await page.is_visible("#panel-jobs") and not await page.is_visible("#panel-search")

            await page.fill("#new-collection", "kb")
            await page.press("#new-collection", "Enter")
            await page.wait_for_function("() => document.querySelector('#collection').value === 'kb'")
            assert await page.text_content("#upload-target") == "kb"

            # Drag and drop three files onto the drop zone, as a file manager would hand them over.
            drop = await page.evaluate_handle("""files => {
                const dt = new DataTransfer();
                for (const [name, text] of files) dt.items.add(new File([text], name, {type: 'text/plain'}));
                return dt;
            }""", [["guide.md", GUIDE], ["budget.csv", BUDGET], ["notes.txt", UNSAFE]])
            async with page.expect_response(lambda r: r.url.endswith("/v1/collections/kb/ingest")) as submitted:
                await page.dispatch_event("#drop-files", "drop", {"dataTransfer": drop})
            job_id = (await (await submitted.value).json())["id"]
            job = page.locator(f'#jobs li[data-job-id="{job_id}"]')
            states = []  # every state the page showed, polled (the row has no event to wait on): a liveness bound
            deadline = time.monotonic() + PATIENCE_S
            while time.monotonic() < deadline:
                state = await job.locator(".state").text_content()
                if not states or states[-1] != state:
                    states.append(state)
                if state in ("succeeded", "failed", "cancelled"):
                    break
                await asyncio.sleep(0.1)
            assert states[-1] == "succeeded", states
            assert await job.locator(".job-files").text_content() == "guide.md, budget.csv, notes.txt"
            assert await job.locator(".percent").text_content() == "100%"
            assert await job.locator("progress").evaluate("p => p.value") == 1
            final = (await api.get(f"/v1/jobs/{job_id}")).json()
            counts = dict(await job.locator(".counts [data-count]").evaluate_all(
                "ds => ds.map(d => [d.dataset.count, d.querySelector('dd').textContent])"))
            assert counts == {k: str(v) for k, v in final["counts"].items() if v is not None}
            assert counts["documents_indexed"] == "3" and counts["documents_failed"] == "0"

            # The file input works too: a second job.
            extra = page.locator("#files")
            async with page.expect_response(lambda r: r.url.endswith("/v1/collections/kb/ingest")) as second:
                await extra.set_input_files([{"name": "extra.md", "mimeType": "text/markdown", "buffer": EXTRA.encode()}])
            second_job = page.locator(f'#jobs li[data-job-id="{(await (await second.value).json())["id"]}"]')
            await second_job.locator('.state[data-state="succeeded"]').wait_for()
            assert await second_job.locator('[data-count="documents_indexed"] dd').text_content() == "1"
            await page.wait_for_function("() => document.querySelector('#collection').selectedOptions[0]"
                                         ".textContent.startsWith('kb (')")
            # Beside the collection: its index, as the API describes it (below the build threshold: no build yet).
            index = (await api.get("/v1/collections/kb")).json()["index"]
            shown_index = f"{index['indexed']} indexed · {index['unindexed']} searched exactly"
            assert index["build"] == "idle" and index["indexed"] == 0 and index["unindexed"] > 0
            await page.wait_for_function("t => document.querySelector('#collection-index').textContent === t",
                                         arg=shown_index)
            assert await page.get_attribute("#collection-index", "data-build") == "idle"
            await page.screenshot(path=shots / "jobs.png", full_page=True)

            await page.click("#tab-search")
            await page.fill("#query", QUERY)
            for mode, fusion in (("dense", ""), ("sparse", ""), ("hybrid", "rrf"), ("hybrid", "dbsf")):
                expected = await _search(page, api, mode, fusion)
                assert expected["mode"] == mode
            await _search(page, api, "", "")  # the collection's default: hybrid
            await page.screenshot(path=shots / "search.png", full_page=True)

            shown = {h["doc_id"]: h for h in await _shown_hits(page)}
            assert "<script>window.__pwned = 1</script>" in shown["notes.txt"]["text"]
            assert await page.evaluate("window.__pwned") is None
            assert shown["guide.md"]["location"]["headings"].startswith("Guide")
            assert "rows" in shown["budget.csv"]["location"]

            # An image search needs a generator, which the minilm profile lacks: the page says so.
            await page.set_input_files("#image", [{"name": "photo.png", "mimeType": "image/png",
                                                   "buffer": raster("PNG", 64, 48)}])
            # Visible once the browser has decoded it (an <img> is 0x0 until then): waited for, not checked at once.
            await page.locator("#image-preview").wait_for(state="visible")
            await page.click("#search-button")
            await page.locator("#error").wait_for()
            assert "generation_not_configured" in await page.text_content("#error")

            # The key lives in sessionStorage: a reload keeps it.
            await page.reload()
            await page.wait_for_function("() => document.querySelector('#collection').value === 'kb'")
            assert errors == []
            await page.close()
    data_calls = [(u, a) for u, a in keyed if "/v1/" in u]
    assert len(data_calls) > 10 and all(a == f"Bearer {API_KEY}" for _, a in data_calls), data_calls
    assert all(a is None for u, a in keyed if "/ui" in u)


async def test_chat_streams_a_grounded_answer_with_clickable_citations(
    vl_settings: Settings, browser: Browser, shots: Path
) -> None:
    _patient(vl_settings)
    with live_server(vl_settings) as base:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=PATIENCE_S) as api:
            assert (await api.post("/v1/collections", json={"name": "docs"})).status_code == 201
            r = await api.post("/v1/collections/docs/documents", json={"documents": DOCS})
            assert r.status_code == 200, r.text
            keyed: list[tuple[str, str | None]] = []
            errors: list[str] = []
            page = await _open(browser, base, keyed, errors)

            # Search with reranking: the reranker's scores are printed beside the vector scores.
            await page.fill("#query", "How do I reset the router?")
            await page.select_option("#rerank", "on")
            async with page.expect_response(lambda r: r.url.endswith("/v1/search")) as answer:
                await page.click("#search-button")
            response = await answer.value
            assert response.status == 200, await response.text()
            sent = json.loads(response.request.post_data or "{}")
            assert sent["rerank"] == {"enabled": True}
            await page.wait_for_function("() => document.querySelector('#search-summary').textContent.includes('· reranked')")
            expected = (await api.post("/v1/search", json=sent)).json()
            shown = await _shown_hits(page)
            assert [h["doc_id"] for h in shown] == [h["doc_id"] for h in expected["hits"]]
            assert [h["scores"]["rerank_score"] for h in shown] == [_score(h["rerank_score"]) for h in expected["hits"]]
            assert "rerank" in dict(await page.eval_on_selector_all(
                "#timings [data-stage]", "ds => ds.map(d => [d.dataset.stage, d.textContent])"))

            # Drop an image on the search form: the VL model writes the query, and the page shows it.
            photo = await page.evaluate_handle("""bytes => {
                const dt = new DataTransfer();
                dt.items.add(new File([new Uint8Array(bytes)], 'photo.png', {type: 'image/png'}));
                return dt;
            }""", list(raster("PNG", 96, 64, color=(200, 40, 40))))
            await page.dispatch_event("#image-drop", "drop", {"dataTransfer": photo})
            async with page.expect_response(lambda r: r.url.endswith("/v1/search/upload")) as answer:
                await page.click("#search-button")
            response = await answer.value
            assert response.status == 200, await response.text()
            result = await response.json()
            assert result["generated_query"]
            await page.locator("#generated-query").wait_for()
            assert await page.text_content("#generated-query") == result["generated_query"]
            await page.click("#image-clear")

            # Chat. Random weights may end a reply at once, so the test (not the page) asks the runner to
            # ignore end-of-sequence: the request is otherwise exactly what the page sends.
            sent_chat: list[dict[str, Any]] = []

            async def longer(route: Any) -> None:
                body = json.loads(route.request.post_data)
                sent_chat.append(body)
                await route.continue_(post_data=json.dumps({**body, "ignore_eos": True, "temperature": 0}))

            await page.route("**/v1/chat/completions", longer)
            await page.click("#tab-chat")
            assert await page.is_checked('#chat-collections input[value="docs"]')
            await page.fill("#chat-max-tokens", "48")
            await page.fill("#chat-input", "How do I reset the router?")
            turns_before = await page.locator("#conversation .turn.assistant").count()
            await page.press("#chat-input", "Control+Enter")
            await page.wait_for_function(
                "n => { const t = document.querySelectorAll('#conversation .turn.assistant');"
                " return t.length > n && t[t.length - 1].dataset.done !== undefined; }",
                arg=turns_before, timeout=PATIENCE_S * 1000)
            turn = page.locator("#conversation .turn.assistant").last
            answer_text = turn.locator(".answer")
            assert await turn.get_attribute("data-done") == "true"
            final = await answer_text.text_content()
            # That the answer grows on screen event by event is test_a_streamed_answer_grows_on_screen_event_by_event's
            # claim (a scripted runner that waits for the page); random weights give no text to wait for here.
            assert sent_chat[0]["stream"] is True and sent_chat[0]["ragserve"]["collections"] == ["docs"]
            assert sent_chat[0]["messages"] == [{"role": "user", "content": "How do I reset the router?"}]
            assert await answer_text.get_attribute("aria-busy") == "false"

            sources = turn.locator(".sources li")
            assert await sources.count() == 3
            assert await sources.locator("button.cite").all_text_contents() == ["[1]", "[2]", "[3]"]
            router = sources.filter(has_text="router").locator("button.cite")
            number = (await router.text_content() or "").strip("[]")
            await router.click()
            view = page.locator("#citation-view")
            assert await view.is_visible()
            assert await page.evaluate("document.activeElement.id") == "citation-view"
            assert await page.text_content("#citation-title") == f"[{number}] router · docs"
            assert await page.text_content("#citation-text") == DOCS[0]["text"]
            where = dict(await page.eval_on_selector_all(
                "#citation-location dd", "ds => ds.map(d => [d.dataset.key, d.textContent])"))
            assert where["chars"] == "0–58" and where["bytes"] == "0–58" and where["page"] == "3"
            assert where["chunk"] == "0" and re.fullmatch(r"0\.\d{4}", where["rerank"])
            await page.screenshot(path=shots / "chat.png", full_page=True)
            await page.keyboard.press("Escape")
            assert not await view.is_visible()
            assert await page.evaluate("document.activeElement.textContent") == f"[{number}]"

            # A second turn carries the first (question and answer) as history.
            await page.fill("#chat-input", "And the chart?")
            await page.click("#chat-send")
            await page.locator("#conversation .turn.assistant[data-done]").nth(1).wait_for()
            assert [m["role"] for m in sent_chat[1]["messages"]] == ["user", "assistant", "user"]
            assert sent_chat[1]["messages"][1]["content"] == final
            assert errors == []
            await page.close()
    assert all(a == f"Bearer {API_KEY}" for u, a in keyed if "/v1/" in u)


ANSWER = ["To reset the router", ", hold the reset button", " for ten seconds", " [1]", "."]
SHOW_ANSWER = """([text, streaming]) => {
    const turns = document.querySelectorAll('#conversation .turn.assistant');
    const turn = turns[turns.length - 1];
    return turn !== undefined && turn.querySelector('.answer').textContent === text
        && (turn.dataset.done === undefined) === streaming;
}"""


async def test_a_streamed_answer_grows_on_screen_event_by_event(tmp_path: Path, browser: Browser, shots: Path) -> None:
    """The runner is scripted and writes each event of the answer only once the page shows the text so far:
    a page (or a relay) that waited for the whole answer would never show the first words, and the test
    fails at the liveness bound naming the text that did not appear. Then the citations chunk arrives, the
    sources are listed and a citation opens on a click."""
    runner = ScriptedRunner(dimensions=384)
    stream = runner.hold_stream(chat_chunks(ANSWER))
    settings = scripted_settings(tmp_path)
    with live_server(settings, transports=runner.transports) as base:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=LIVENESS_S) as api:
            assert (await api.post("/v1/collections", json={"name": "docs"})).status_code == 201
            r = await api.post("/v1/collections/docs/documents", json={"documents": DOCS})
            assert r.status_code == 200, r.text
        keyed: list[tuple[str, str | None]] = []
        errors: list[str] = []
        page = await _open(browser, base, keyed, errors)
        page.set_default_timeout(LIVENESS_S * 1000)
        await page.click("#tab-chat")
        assert await page.is_checked('#chat-collections input[value="docs"]')
        # The page records what the answer showed after each redraw (a MutationObserver): nothing but the
        # answer's prefixes, each once, in order, may ever be on screen.
        await page.evaluate("""() => {
            window.__answerShown = [];
            new MutationObserver(() => {
                const turns = document.querySelectorAll('#conversation .turn.assistant');
                const node = turns.length ? turns[turns.length - 1].querySelector('.answer') : null;
                const text = node ? node.textContent : '';
                const shown = window.__answerShown;
                if (text && (!shown.length || shown[shown.length - 1] !== text)) shown.push(text);
            }).observe(document.getElementById('conversation'), {childList: true, subtree: true, characterData: true});
        }""")
        await page.fill("#chat-input", "How do I reset the router?")
        async with page.expect_request(lambda r: r.url.endswith("/v1/chat/completions")) as asked:
            await page.press("#chat-input", "Control+Enter")
        sent = json.loads((await asked.value).post_data or "{}")
        prefixes = ["".join(ANSWER[: n + 1]) for n in range(len(ANSWER))]
        turn = page.locator("#conversation .turn.assistant").last
        for n, text in enumerate(prefixes):
            try:
                await page.wait_for_function(SHOW_ANSWER, arg=[text, True])
            except Exception as exc:  # Playwright's TimeoutError: the deadlock a buffering page or relay makes
                shown = await page.evaluate("window.__answerShown")
                raise AssertionError(f"the page did not show {text!r} (event {n}) within {LIVENESS_S:g}s, while "
                                     f"the runner waited for it to write more; shown so far: {shown}") from exc
            assert await turn.locator(".answer").get_attribute("aria-busy") == "true"
            stream.observed(n)  # the page shows event n: the runner may write the next (the last: [DONE])
        await page.wait_for_function(SHOW_ANSWER, arg=[prefixes[-1], False])
        assert await turn.get_attribute("data-done") == "true"
        assert await turn.locator(".answer").get_attribute("aria-busy") == "false"
        assert await page.evaluate("window.__answerShown") == prefixes
        assert sent["stream"] is True and sent["ragserve"]["collections"] == ["docs"]
        assert sent["messages"] == [{"role": "user", "content": "How do I reset the router?"}]
        (upstream,) = runner.bodies("/v1/chat/completions")
        assert upstream["stream"] is True and upstream["messages"][-1]["content"][-1]["text"].endswith(
            "Question: How do I reset the router?")

        sources = turn.locator(".sources li")
        assert await sources.locator("button.cite").all_text_contents() == ["[1]", "[2]", "[3]"]
        assert sorted(await sources.locator(".doc-id").all_text_contents()) == ["chart", "fox", "router"]
        assert await turn.locator(".answer button.cite").all_text_contents() == ["[1]"]  # the cited [1], a button
        router = sources.filter(has_text="router").locator("button.cite")
        number = (await router.text_content() or "").strip("[]")
        await router.click()
        assert await page.is_visible("#citation-view")
        assert await page.text_content("#citation-title") == f"[{number}] router · docs"
        assert await page.text_content("#citation-text") == DOCS[0]["text"]
        where = dict(await page.eval_on_selector_all(
            "#citation-location dd", "ds => ds.map(d => [d.dataset.key, d.textContent])"))
        assert where["chars"] == "0–58" and where["bytes"] == "0–58" and where["page"] == "3"
        assert where["cited"] == ("yes" if number == "1" else "no")
        await page.screenshot(path=shots / "chat-stream.png", full_page=True)
        assert errors == []
        await page.close()
    assert all(a == f"Bearer {API_KEY}" for u, a in keyed if "/v1/" in u)


SCORED = [
    {"id": "boot", "text": "The device fails to boot after the firmware update."},
    {"id": "loader", "text": "Boot halted with error XQ-7719 reported by the loader."},
    {"id": "chart", "text": "The chart shows quarterly revenue rising in every region."},
    {"id": "fox", "text": "The quick brown fox jumps over the lazy dog."},
]
SCORED_QUERY = "firmware boot loader"
SCORED_NO_TERM = {"chart", "fox"}  # no word in common with the query: no BM25 score
SHOWN_SCORES = """items => items.map(li => ({
    doc_id: li.querySelector('.doc-id').textContent,
    scores: [...li.querySelectorAll('.scores [data-score]')]
        .map(d => [d.dataset.score, d.querySelector('dt').textContent, d.querySelector('dd').textContent]),
}))"""


async def test_a_hybrid_hit_shows_its_fused_dense_and_bm25_scores_labelled(
    tmp_path: Path, browser: Browser, shots: Path
) -> None:
    """The embedding runner is scripted (a vector per text), so each hit's dense score is known here (numpy's
    cosine of the two vectors); its BM25 score is the one a sparse-only search gives it, and none for a hit
    sharing no word with the query. The page must print exactly those, labelled fused, dense and BM25; a dense
    or a sparse search prints its one score, labelled as what it is."""
    settings = scripted_embed.scripted_settings(tmp_path)
    settings.qdrant.edge_process = False
    with live_server(settings, transports={"embedding": scripted_embed.ScriptedEmbedder().transport}) as base:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=LIVENESS_S) as api:
            assert (await api.post("/v1/collections", json={"name": "kb"})).status_code == 201
            r = await api.post("/v1/collections/kb/documents", json={"documents": SCORED})
            assert r.status_code == 200, r.text
            sparse = await api.post("/v1/search", json={"collection": "kb", "query": SCORED_QUERY, "mode": "sparse"})
            bm25 = {h["doc_id"]: h["vector_score"] for h in sparse.json()["hits"]}
            keyed: list[tuple[str, str | None]] = []
            errors: list[str] = []
            page = await _open(browser, base, keyed, errors)
            page.set_default_timeout(LIVENESS_S * 1000)
            await page.fill("#query", SCORED_QUERY)
            shown: dict[str, list[dict[str, Any]]] = {}
            answers: dict[str, dict[str, Any]] = {}
            for mode in ("hybrid", "dense", "sparse"):
                await page.select_option("#mode", mode)
                async with page.expect_response(lambda r: r.url.endswith("/v1/search")) as answer:
                    await page.click("#search-button")
                response = await answer.value
                assert response.status == 200, await response.text()
                assert json.loads(response.request.post_data or "{}")["score_details"] is True
                answers[mode] = await response.json()
                await page.wait_for_function(
                    "r => document.querySelector('#search-summary').textContent.startsWith(r)",
                    arg=f"{len(answers[mode]['hits'])} hits · {mode}")
                shown[mode] = await page.eval_on_selector_all("#hits > li.hit", SHOWN_SCORES)
                if mode == "hybrid":
                    await page.screenshot(path=shots / "hybrid-scores.png", full_page=True)
            assert errors == []
            await page.close()

    def cosine(doc_id: str) -> float:
        text = next(d["text"] for d in SCORED if d["id"] == doc_id)
        return float(np.dot(scripted_embed.vector(SCORED_QUERY), scripted_embed.vector(text)))

    hybrid = answers["hybrid"]["hits"]
    assert {h["doc_id"] for h in hybrid} == {d["id"] for d in SCORED}
    assert [h["doc_id"] for h in shown["hybrid"]] == [h["doc_id"] for h in hybrid]
    for hit, api_hit in zip(shown["hybrid"], hybrid, strict=True):
        doc_id = hit["doc_id"]
        assert api_hit["dense_score"] == pytest.approx(cosine(doc_id), abs=1e-5)
        assert hit["scores"] == [
            ["score", "score", _score(api_hit["vector_score"])],
            ["vector_score", "fused", _score(api_hit["vector_score"])],
            ["dense_score", "dense", _score(cosine(doc_id))],
            ["bm25_score", "BM25", "—" if doc_id in SCORED_NO_TERM else _score(bm25[doc_id])],
            ["rerank_score", "rerank", "—"],
        ]
    assert {h["doc_id"] for h in hybrid if h["bm25_score"] is None} == SCORED_NO_TERM
    for mode, label in (("dense", "dense"), ("sparse", "BM25")):
        assert [h["scores"] for h in shown[mode]] == [
            [["score", "score", _score(h["score"])], ["vector_score", label, _score(h["vector_score"])],
             ["rerank_score", "rerank", "—"]] for h in answers[mode]["hits"]]
    assert sorted(h["doc_id"] for h in shown["sparse"]) == sorted(bm25) == ["boot", "loader"]  # BM25 matches these


CONTEXT_DOCS = [
    {"id": "boot", "text": "The device fails to boot after the firmware update. Hold the reset button."},
    {"id": "boot-copy", "text": "The device fails to boot after the firmware update. Hold the reset button."},
    {"id": "loader", "text": "Boot halted with error XQ-7719 reported by the loader."},
]


async def test_the_context_tab_shows_the_packed_text_its_tokens_and_what_was_left_out(
    tmp_path: Path, browser: Browser, shots: Path
) -> None:
    """The embedding runner is scripted (no vLLM); the page's context, token count and left-out candidates are
    held to the API's answer to the same request, byte for byte."""
    settings = scripted_embed.scripted_settings(tmp_path)
    settings.qdrant.edge_process = False
    with live_server(settings, transports={"embedding": scripted_embed.ScriptedEmbedder().transport}) as base:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=LIVENESS_S) as api:
            assert (await api.post("/v1/collections", json={"name": "kb"})).status_code == 201
            r = await api.post("/v1/collections/kb/documents", json={"documents": CONTEXT_DOCS})
            assert r.status_code == 200, r.text
            keyed: list[tuple[str, str | None]] = []
            errors: list[str] = []
            page = await _open(browser, base, keyed, errors)
            page.set_default_timeout(LIVENESS_S * 1000)
            await page.click("#tab-context")
            await page.fill("#context-query", "firmware boot")
            await page.fill("#context-budget", "300")
            async with page.expect_response(lambda r: r.url.endswith("/v1/context")) as answer:
                await page.click("#context-button")
            response = await answer.value
            assert response.status == 200, await response.text()
            sent = json.loads(response.request.post_data or "{}")
            result = await response.json()
            await page.wait_for_function("() => !document.querySelector('#context-result').hidden")
            shown = await page.text_content("#context-text")
            tokens = await page.text_content("#context-tokens")
            dropped = await page.eval_on_selector_all("#context-dropped > li", """items => items.map(li =>
                [li.dataset.docId, li.dataset.reason, li.textContent])""")
            await page.screenshot(path=shots / "context-tab.png", full_page=True)
            again = await api.post("/v1/context", json=sent)
            assert errors == []
            await page.close()
    assert sent == {"collection": "kb", "query": "firmware boot", "budget_tokens": 300, "order": "score"}
    assert again.json()["context"] == result["context"] == shown
    assert tokens == f"{result['tokens']} / 300 tokens"
    assert result["tokens"] <= 300 and result["passages"]
    assert dropped == [[d["doc_id"], d["reason"], f"{d['doc_id']} #{d['chunk_index']} {d['reason']} "
                        + {"duplicate": "repeats passage", "merged": "merged into passage",
                           "budget": "did not fit the budget"}[d["reason"]]
                        + (f" [{d['passage']}]" if d["passage"] else "")] for d in result["dropped"]]
    assert [d[:2] for d in dropped if d[1] == "duplicate"] in ([["boot-copy", "duplicate"]], [["boot", "duplicate"]])
