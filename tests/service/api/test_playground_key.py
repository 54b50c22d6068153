"""The playground's key field, as a person uses it in headless Chromium: paste a key, press Enter, and the
page uses it (a wrong key says so in the error line; the right one lists the collections). The page keeps no
key between tests (sessionStorage of a fresh page), so the collections listed came from the Enter."""

from __future__ import annotations

import httpx

from service.config import Settings
from tests.support.app import API_KEY
from tests.support.browser import chromium
from tests.support.server import live_server

PATIENCE_MS = 300_000  # a liveness bound, not a timing claim: the machine is shared and may be slow


async def test_enter_in_the_key_field_uses_the_key(minilm_settings: Settings) -> None:
    from playwright.async_api import expect

    with live_server(minilm_settings) as url:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {API_KEY}"}) as http:
            created = await http.post(f"{url}/v1/collections", json={"name": "kb"})
        assert created.status_code == 201, created.text
        async with chromium() as browser:
            page = await browser.new_page()
            await page.goto(f"{url}/ui/")
            status, error = page.locator("#status"), page.locator("#error")
            await expect(status).to_have_text("paste an API key to start", timeout=PATIENCE_MS)
            await page.fill("#api-key", "wrong-key-0123456789abcdef")
            await page.press("#api-key", "Enter")
            await expect(error).to_have_text("401 invalid_api_key: invalid API key", timeout=PATIENCE_MS)
            await page.fill("#api-key", API_KEY)
            await page.press("#api-key", "Enter")
            await expect(status).to_have_text("1 collection", timeout=PATIENCE_MS)
            await expect(page.locator("#collection option")).to_have_text(["kb (0 chunks)"], timeout=PATIENCE_MS)
            await expect(error).to_be_hidden(timeout=PATIENCE_MS)
