"""The routing key of a chat request: its prefix (system, history, image, context), never its question."""

from __future__ import annotations

from service.generation.prompts import grounded_messages, image_query_messages
from service.upstream.affinity import prefix_key

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
OTHER_IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,BBBB"}}
PASSAGES = "[1] alpha\n\n[2] beta"


def grounded(question: str, passages: str = PASSAGES, image: dict | None = IMAGE) -> list[dict]:  # type: ignore[type-arg]
    parts: list[dict] = [{"type": "text", "text": question}, *([image] if image else [])]  # type: ignore[type-arg]
    return grounded_messages([{"role": "system", "content": "Be brief."}, {"role": "user", "content": parts}],
                             passages, question)


def test_grounded_questions_on_the_same_context_share_a_key() -> None:
    assert prefix_key(grounded("What is it?")) == prefix_key(grounded("Who made it?"))


def test_the_context_the_image_and_the_system_prompt_are_in_the_key() -> None:
    key = prefix_key(grounded("q"))
    assert prefix_key(grounded("q", "[1] gamma")) != key
    assert prefix_key(grounded("q", image=OTHER_IMAGE)) != key
    assert prefix_key(grounded("q", image=None)) != key
    other_system = grounded("q")
    other_system[0] = {"role": "system", "content": "Be long."}
    assert prefix_key(other_system) != key


def test_the_model_is_in_the_key() -> None:
    """A LoRA adapter's requests have a prefix cache of their own."""
    assert prefix_key(grounded("q"), model="tenant-a") != prefix_key(grounded("q"), model="base")


def test_proxied_chats_key_on_their_history_not_their_last_turn() -> None:
    history = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
               {"role": "assistant", "content": "Hello."}]
    one = prefix_key([*history, {"role": "user", "content": "What is 2+2?"}])
    two = prefix_key([*history, {"role": "user", "content": "And 3+3?"}])
    assert one == two is not None
    assert prefix_key([{"role": "user", "content": "Just a question"}]) is None  # nothing to cache: no key
    assert prefix_key([]) is None


def test_image_queries_key_on_the_image() -> None:
    assert prefix_key(image_query_messages("data:image/png;base64,AAAA", "what is this")) == prefix_key(
        image_query_messages("data:image/png;base64,AAAA", "who made this"))
    assert prefix_key(image_query_messages("data:image/png;base64,AAAA", "")) != prefix_key(
        image_query_messages("data:image/png;base64,BBBB", ""))
