"""The ``ragserve`` command line as a user runs it: a subprocess of this interpreter against a live API."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.app import API_KEY


def ragserve(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    """``ragserve ARGS --url URL`` with the tests' key in ``RAGSERVE_API_KEY``; output captured as text."""
    env = {**os.environ, "RAGSERVE_API_KEY": API_KEY}
    return subprocess.run([sys.executable, "-m", "service.cli", *args, "--url", url], env=env, text=True,
                          capture_output=True, timeout=300)
