"""How each passage is written into a context: a template with a fixed set of placeholders.

``{number}``, ``{title}``, ``{source}``, ``{page}`` and ``{text}``, literal braces doubled (``{{``, ``}}``);
nothing else. No ``str.format``: its fields reach attributes and items (``{text.__class__}``), so a template
is parsed here into literal parts and field names, and rendered by joining them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.errors import InvalidInput

FIELDS = ("number", "title", "source", "page", "text")
DEFAULT_TEMPLATE = "[{number}] {title}\n{text}"
SEPARATOR = "\n\n"
"""Between two passages of a context."""
MAX_TEMPLATE_CHARS = 1000
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


@dataclass(frozen=True)
class Template:
    parts: tuple[tuple[bool, str], ...]
    """(is a field, literal text or field name), in order."""

    @classmethod
    def parse(cls, text: str, *, param: str = "template") -> Template:
        if len(text) > MAX_TEMPLATE_CHARS:
            raise InvalidInput(f"template is longer than {MAX_TEMPLATE_CHARS} characters", code="template_too_long",
                               param=param)
        parts: list[tuple[bool, str]] = []
        last = 0
        for m in _TOKEN.finditer(text):
            if m.start() > last:
                parts.append((False, text[last:m.start()]))
            token = m.group(0)
            if token in ("{{", "}}"):
                parts.append((False, token[0]))
            elif m.group(1) is not None and m.group(1) in FIELDS:
                parts.append((True, m.group(1)))
            elif m.group(1) is not None:
                raise InvalidInput(f"unknown template field {{{m.group(1)}}}: the fields are "
                                   + ", ".join(f"{{{f}}}" for f in FIELDS), code="unknown_template_field",
                                   param=param)
            else:
                raise InvalidInput("a lone brace in the template: write {{ or }} for a literal one",
                                   code="invalid_template", param=param)
            last = m.end()
        if last < len(text):
            parts.append((False, text[last:]))
        names = {name for is_field, name in parts if is_field}
        if not {"number", "text"} <= names:
            raise InvalidInput("the template must hold {number} (what the answer cites) and {text}",
                               code="invalid_template", param=param)
        return cls(tuple(parts))

    def render(self, values: dict[str, str]) -> str:
        return "".join(values[name] if is_field else name for is_field, name in self.parts)
