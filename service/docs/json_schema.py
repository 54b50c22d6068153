"""JSON Schema (as the OpenAPI document writes it) in words: a field's type, its limits, its default."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from service.docs.markdown import code
from service.documents.payload import INT64_MAX, INT64_MIN

Schema = dict[str, Any]
Link = Callable[[str], str]
"""A schema name -> its Markdown link."""

REF_PREFIX = "#/components/schemas/"


def ref_name(schema: Schema) -> str | None:
    ref = schema.get("$ref")
    return ref[len(REF_PREFIX):] if isinstance(ref, str) and ref.startswith(REF_PREFIX) else None


def _members(schema: Schema) -> list[Schema]:
    return list(schema.get("anyOf") or schema.get("oneOf") or [])


def type_text(schema: Schema, link: Link) -> str:
    """``integer``, ``array of string``, ``[SearchImage](#searchimage) or null``, ``one of `rrf`, `dbsf```..."""
    name = ref_name(schema)
    if name is not None:
        return link(name)
    if "const" in schema:
        return code(json.dumps(schema["const"]))
    if "enum" in schema:
        return "one of " + ", ".join(code(v if isinstance(v, str) else json.dumps(v)) for v in schema["enum"])
    members = _members(schema)
    if members:
        texts: list[str] = []
        for member in members:
            if member.get("type") != "null":
                text = type_text(member, link)
                if text not in texts:
                    texts.append(text)
        if any(m.get("type") == "null" for m in members):
            texts.append("null")
        return " or ".join(texts)
    if len(schema.get("allOf", [])) == 1:
        return type_text(schema["allOf"][0], link)
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return f"array of {type_text(items, link)}" if isinstance(items, dict) and items else "array"
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"object of {type_text(values, link)}"
        return "object"
    if kind == "string" and schema.get("format") == "binary":
        return "file"
    if isinstance(kind, list):
        return " or ".join(kind)
    return str(kind) if kind else "any JSON"


def _readable(pattern: str) -> str:
    """A regular expression as a reader can use it: those that only spell out "no control characters"
    (they hold raw control characters) are said in words."""
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in pattern):
        return "no control characters"
    return "pattern " + code(pattern)


def _range(low: Any, high: Any, low_open: bool = False, high_open: bool = False) -> str | None:
    low = None if low in (INT64_MIN, None) else low
    high = None if high in (INT64_MAX, None) else high
    if low is not None and high is not None and not (low_open or high_open):
        return f"{low}–{high}"
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '≥'} {low}")
    if high is not None:
        parts.append(f"{'<' if high_open else '≤'} {high}")
    return ", ".join(parts) or None


def _own_limits(schema: Schema) -> list[str]:
    out: list[str] = []
    low = schema.get("exclusiveMinimum", schema.get("minimum"))
    high = schema.get("exclusiveMaximum", schema.get("maximum"))
    if (text := _range(low, high, "exclusiveMinimum" in schema, "exclusiveMaximum" in schema)) is not None:
        out.append(text)
    if (text := _range(schema.get("minLength"), schema.get("maxLength"))) is not None:
        out.append(f"length {text}")
    if (text := _range(schema.get("minItems"), schema.get("maxItems"))) is not None:
        out.append(f"{text} items")
    if (text := _range(schema.get("minProperties"), schema.get("maxProperties"))) is not None:
        out.append(f"{text} keys")
    if "format" in schema and schema["format"] != "binary":
        out.append(schema["format"])
    if "pattern" in schema:
        out.append(_readable(schema["pattern"]))
    keys = schema.get("propertyNames")
    if isinstance(keys, dict) and keys:
        described = _own_limits(keys)
        if described:
            out.append("keys: " + ", ".join(described))
    items = schema.get("items")
    if isinstance(items, dict) and ref_name(items) is None:
        described = _own_limits(items)
        if described:
            out.append("each: " + ", ".join(described))
    return out


def limits_text(schema: Schema) -> str:
    """The limits a value must keep: ranges, lengths, item counts, patterns, of the field and of each of the
    forms it may take."""
    out = _own_limits(schema)
    for member in _members(schema):
        if member.get("type") != "null" and ref_name(member) is None:
            for text in _own_limits(member):
                if text not in out:
                    out.append(text)
    return "; ".join(out)


def default_text(schema: Schema) -> str:
    if "default" not in schema:
        return ""
    return code(json.dumps(schema["default"], ensure_ascii=False))


def rst_literals(text: str) -> str:
    """Docstrings' ``literal`` as Markdown's `literal`."""
    return text.replace("``", "`")


def description(schema: Schema) -> str:
    for candidate in (schema, *_members(schema)):
        if candidate.get("description"):
            return rst_literals(str(candidate["description"]))
    return ""


def refs(node: Any) -> set[str]:
    """Every schema name referenced anywhere below ``node``."""
    found: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            name = ref_name(item)
            if name is not None:
                found.add(name)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found
