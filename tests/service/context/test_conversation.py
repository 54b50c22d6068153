"""The rule that turns a conversation into a query without a generator."""

from __future__ import annotations

from service.context.conversation import conversation_query


def test_a_question_that_stands_alone_is_the_query() -> None:
    turns = ["What is the lift of a Boeing wing?", "How is boundary layer transition predicted in hypersonic flow?"]
    got = conversation_query(turns, max_chars=4096)
    assert (got.query, got.follow_up) == (turns[-1], False)


def test_a_short_follow_up_carries_the_earlier_user_turns() -> None:
    turns = ["How do delta wings behave at high angles of attack?", "and what about its drag?"]
    got = conversation_query(turns, max_chars=4096)
    assert (got.query, got.follow_up) == ("How do delta wings behave at high angles of attack?\n"
                                          "and what about its drag?", True)
    three = ["first question about nozzles", "second question about slender bodies in supersonic flow",
             "third question about cones", "what about it?"]
    assert conversation_query(three, max_chars=4096).query == (
        "second question about slender bodies in supersonic flow\nthird question about cones\nwhat about it?")


def test_earlier_turns_that_do_not_fit_are_left_out() -> None:
    got = conversation_query(["x" * 50, "and its drag?"], max_chars=40)
    assert (got.query, got.follow_up) == ("and its drag?", False)
    assert conversation_query(["  ", ""], max_chars=100).query == ""
