"""The one check both generated references share: the committed file is what its generator writes now."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from service.docs.markdown import REPO_ROOT


def assert_fresh(path: Path, rendered: str, command: str) -> None:
    relative = path.relative_to(REPO_ROOT)
    committed = path.read_text(encoding="utf-8") if path.exists() else ""
    if committed == rendered:
        return
    diff = "".join(list(difflib.unified_diff(
        committed.splitlines(keepends=True), rendered.splitlines(keepends=True),
        fromfile=f"{relative} (committed)", tofile=f"{relative} (generated now)", n=1))[:60])
    pytest.fail(f"{relative} is stale: run `{command}` and commit the result\n{diff}", pytrace=False)
