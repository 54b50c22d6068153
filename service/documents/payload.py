"""What a stored point may carry: text, ids and metadata the store can hold and hand back.

Checked at every way in (the documents API, ingest options, JSONL records), because a value the engine
accepts on write is not always one it can read back: a payload nested past the engine's deserializer
limit (128 levels in serde_json) makes every later search of the collection fail, an integer past 64
bits cannot be written or filtered, and ``NaN`` is no JSON number. Refused here, nothing is stored.

- everywhere: no lone surrogates (JSON's ``"\\ud800"`` escapes decode to them; they are no characters);
- ids and metadata keys: no control characters (C0, DEL, C1);
- text (documents, string metadata values, queries): no NUL and no C0 control other than tab, line feed,
  vertical tab, form feed and carriage return (whitespace in real documents);
- metadata: nested at most :data:`MAX_METADATA_DEPTH` levels; integers within 64 bits; finite floats.
"""

from __future__ import annotations

import math
import re
from typing import Any

MAX_METADATA_DEPTH = 16
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

CONTROL = "\x00-\x1f\x7f-\x9f"
TEXT_CONTROL = "\x00-\x08\x0e-\x1f"
ID_PATTERN = f"^[^{CONTROL}]+$"
"""A document id or metadata key: no control characters (JSON Schema pattern, ECMA-262 syntax)."""
TEXT_PATTERN = f"^[^{TEXT_CONTROL}]*$"
"""Text: control characters other than whitespace refused."""
NON_BLANK_TEXT_PATTERN = f"^[^{TEXT_CONTROL}]*[^{TEXT_CONTROL}\\s][^{TEXT_CONTROL}]*$"
"""Text with at least one character that is not whitespace."""

_ID_BAD = re.compile(f"[{CONTROL}]")
_TEXT_BAD = re.compile(f"[{TEXT_CONTROL}]")


def id_problem(value: str) -> str | None:
    m = _ID_BAD.search(value)
    return unicode_problem(value) if m is None else f"holds the control character U+{ord(m.group()):04X}"


def text_problem(value: str) -> str | None:
    m = _TEXT_BAD.search(value)
    return unicode_problem(value) if m is None else f"holds the control character U+{ord(m.group()):04X}"


def unicode_problem(value: str) -> str | None:
    """A lone surrogate (from a ``\\ud800`` escape) is no character: it cannot be encoded as UTF-8."""
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"holds a lone surrogate U+{ord(value[exc.start]):04X}, which is not a Unicode character"
    return None


def metadata_problem(metadata: Any) -> str | None:
    """Why ``metadata`` (a JSON object) cannot be stored, or None. Walked without recursion."""
    if not isinstance(metadata, dict):
        return "must be an object"
    stack: list[tuple[Any, str, int]] = [(metadata, "metadata", 1)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, dict):
            if depth > MAX_METADATA_DEPTH:
                return f"{where}: nested deeper than {MAX_METADATA_DEPTH} levels"
            for key, child in node.items():
                if not isinstance(key, str):
                    return f"{where}: keys must be strings"
                if (why := id_problem(key) if key else "is empty") is not None:
                    return f"{where}: key {key!r} {why}"
                stack.append((child, f"{where}.{key}", depth + 1))
        elif isinstance(node, list):
            if depth > MAX_METADATA_DEPTH:
                return f"{where}: nested deeper than {MAX_METADATA_DEPTH} levels"
            stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(node))
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int):
            if not INT64_MIN <= node <= INT64_MAX:
                return f"{where}: integer {node} does not fit in 64 bits"
        elif isinstance(node, float):
            if not math.isfinite(node):
                return f"{where}: {node} is not a finite number"
        elif isinstance(node, str):
            if (why := text_problem(node)) is not None:
                return f"{where} {why}"
        else:
            return f"{where}: {type(node).__name__} is not a JSON value"
    return None


def check_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """A Pydantic after-validator: ``metadata`` back, or ``ValueError`` saying what is wrong."""
    if (why := metadata_problem(metadata)) is not None:
        raise ValueError(why)
    return metadata
