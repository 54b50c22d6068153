"""Prompt layout: stable parts first (system, history, image), then what changes (context, question)."""

from __future__ import annotations

from service.generation.prompts import (
    GROUNDED_SYSTEM_PROMPT,
    grounded_messages,
    image_query_messages,
)

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def _conversation(question: str) -> list[dict]:
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": [{"type": "text", "text": question}, IMAGE]},
    ]


def test_grounded_layout() -> None:
    messages = grounded_messages(_conversation("What is it?"), "[1] alpha\n\n[2] beta",
                                 "What is it?")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == GROUNDED_SYSTEM_PROMPT + "\n\nBe brief."
    last = messages[-1]["content"]
    assert last[0] == IMAGE  # the image moves before the text, whatever order the caller used
    assert last[1]["text"] == "Context:\n[1] alpha\n\n[2] beta\n\nQuestion: What is it?"


def test_two_questions_about_the_same_image_share_the_longest_prefix() -> None:
    a = grounded_messages(_conversation("Q1"), "[1] one", "Q1")
    b = grounded_messages(_conversation("Q2"), "[1] two", "Q2")
    assert a[:-1] == b[:-1]
    assert a[-1]["content"][0] == b[-1]["content"][0]  # the image part too
    assert a[-1]["content"][1] != b[-1]["content"][1]


def test_no_passages_is_said_plainly() -> None:
    (_, user) = grounded_messages([{"role": "user", "content": "Q"}], "", "Q")
    assert user["content"][-1]["text"].startswith("Context: (no passages were found)")


def test_image_query_prompt_puts_the_image_first() -> None:
    system, user = image_query_messages("data:image/png;base64,AAAA", "how to reset?")
    assert system["role"] == "system" and "visible" in system["content"]
    assert user["content"][0]["image_url"]["url"] == "data:image/png;base64,AAAA"
    assert user["content"][1]["text"] == "Question: how to reset?\nSearch query:"
    assert image_query_messages("data:,", "")[1]["content"][1]["text"] == "Search query:"
