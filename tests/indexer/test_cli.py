"""``ragserve index`` and ``ragserve search`` as a user runs them, against the live API with its worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service.config import Settings
from tests.support.app import API_KEY
from tests.support.server import live_server


def _ragserve(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAGSERVE_API_KEYS": API_KEY}
    return subprocess.run([sys.executable, "-m", "service.cli", *args, "--url", url], env=env, text=True,
                          capture_output=True, timeout=300)


def test_index_shows_progress_and_summary_then_search(minilm_settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    (folder / "sub").mkdir(parents=True)
    (folder / "espresso.md").write_text("# Coffee\n## Espresso\nEspresso forces hot water through fine coffee.\n")
    (folder / "sub" / "tea.txt").write_text("Green tea is steeped at about eighty degrees.")
    (folder / "skip.log").write_text("not wanted")
    minilm_settings.indexer.poll_s = 0.05
    with live_server(minilm_settings, with_worker=True) as url:
        first = _ragserve("index", str(folder), "--collection", "kb", "--exclude", "*.log", url=url)
        again = _ragserve("index", str(folder), "--collection", "kb", "--exclude", "*.log", url=url)
        found = _ragserve("search", "how is espresso made", "--collection", "kb", url=url)
    assert first.returncode == 0, first.stderr
    assert "succeeded" in first.stdout and "2 seen, 2 indexed" in first.stdout
    assert "docs 2/2" in first.stderr and "[####" in first.stderr  # the live progress bar
    assert again.returncode == 0 and "2 unchanged" in again.stdout
    assert found.returncode == 0, found.stderr
    top = found.stdout.splitlines()[0]
    assert "espresso.md#0" in top and "Coffee > Espresso" in top
