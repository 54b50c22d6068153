"""The little Markdown the generated references need: tables, code spans, GitHub heading anchors, and
the check that a committed file is what its generator writes now."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def cell(text: object) -> str:
    """One table cell: on one line, with its pipes escaped (GitHub honours ``\\|`` inside code spans too)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def code(text: object) -> str:
    """A code span that survives backticks in ``text``."""
    value = str(text)
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation other than ``-`` and ``_`` dropped,
    spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def check_or_write(path: Path, render: Callable[[], str], command: str, argv: Sequence[str] | None = None) -> int:
    """``--check``: exit status 1 and a message when ``path`` differs from ``render()``; otherwise write it."""
    args = list(sys.argv[1:] if argv is None else argv)
    text = render()
    relative = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
    if "--check" in args:
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            print(f"{relative} is stale: run `{command}` and commit the result", file=sys.stderr)
            return 1
        print(f"{relative} is up to date")
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {relative}")
    return 0
