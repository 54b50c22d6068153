"""Headless Chromium for tests that use the playground as a person would.

Debian's ``chromium`` package, driven by Playwright from PyPI through ``executable_path``: Playwright's
own browser download (``playwright install``) is never used. tests/setup-browser.sh installs the package;
tests/run.sh then sets ``RAGSERVE_TEST_BROWSER=required`` so that a missing browser fails the run instead
of skipping it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser

# A closed network: nothing in the background may try to reach out (QUIC, updates, sync, first-run pages).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def chromium_path() -> str | None:
    return os.environ.get("RAGSERVE_TEST_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def _unavailable(reason: str) -> None:
    if os.environ.get("RAGSERVE_TEST_BROWSER") == "required":
        pytest.fail(f"{reason} (RAGSERVE_TEST_BROWSER=required; tests/setup-browser.sh installs it)")
    pytest.skip(f"{reason}: run tests/setup-browser.sh")


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        _unavailable("playwright is not installed")
    executable = chromium_path()
    if executable is None:
        _unavailable("Debian's chromium is not installed")
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


def artifacts_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """Where screenshots go: ``$RAGSERVE_TEST_ARTIFACTS/<name>`` when set, else under pytest's base temp
    folder (kept after the run, the last three runs). The same folder each time a session asks (a module
    fixture set up again, as under pytest-repeat's ``--count``)."""
    root = os.environ.get("RAGSERVE_TEST_ARTIFACTS")
    path = Path(root) / name if root else tmp_path_factory.getbasetemp() / name
    path.mkdir(parents=True, exist_ok=True)
    return path
