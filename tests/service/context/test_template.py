"""Templates: a fixed set of placeholders, no expressions, one length limit."""

from __future__ import annotations

import pytest

from service.context.template import MAX_TEMPLATE_CHARS, Template
from service.errors import InvalidInput

VALUES = {"number": "3", "title": "Owls", "source": "birds.md", "page": "2", "text": "They hunt at night."}


def test_placeholders_and_doubled_braces_render() -> None:
    t = Template.parse("{{[{number}]}} {title} ({source}, p. {page}): {text}")
    assert t.render(VALUES) == "{[3]} Owls (birds.md, p. 2): They hunt at night."


@pytest.mark.parametrize(("template", "code"), [
    ("{number} {text.__class__}", "unknown_template_field"),  # str.format would reach the attribute
    ("{number} {text[0]}", "unknown_template_field"),
    ("{number} {author} {text}", "unknown_template_field"),
    ("{number} { text}", "unknown_template_field"),
    ("{number} {text", "invalid_template"),
    ("{number} text}", "invalid_template"),
    ("{title}: {text}", "invalid_template"),  # no {number}: nothing to cite
    ("[{number}]", "invalid_template"),  # no {text}
    ("{number}{text}" + "x" * MAX_TEMPLATE_CHARS, "template_too_long"),
])
def test_anything_else_is_refused_with_its_code(template: str, code: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        Template.parse(template)
    assert (refused.value.code, refused.value.param) == (code, "template")
