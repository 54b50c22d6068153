"""The event-stream decoder both chat streams share, on the lines the server sends."""

from __future__ import annotations

import json

import pytest

from service.client import ConnectionFailed, Timeout
from service.client.streaming import ChatStreamDecoder, chat_result


def _chunk(content: str | None = None, finish: str | None = None, **extra: object) -> str:
    choices = [] if content is None and finish is None else [{"index": 0, "delta": {"content": content},
                                                              "finish_reason": finish}]
    return "data: " + json.dumps({"id": "c1", "model": "m", "choices": choices, **extra})


CITATION = {"number": 1, "collection": "kb", "doc_id": "d", "chunk_index": 0, "id": "p", "score": 0.5,
            "rerank_score": 0.9, "cited": True, "text": "t", "slide": 3}
SEARCH_ID = "s_" + "0123456789abcdef" * 2


def test_deltas_then_citations_then_done() -> None:
    decoder = ChatStreamDecoder()
    lines = [_chunk("Hel"), "", _chunk("lo [1]"), ": keep-alive", _chunk(finish="stop"),
             _chunk(ragserve={"search_id": SEARCH_ID, "citations": [CITATION],
                              "retrieval": {"collections": ["kb"], "query": "q", "reranked": True}}),
             "data: [DONE]"]
    deltas = [d for line in lines for d in decoder.feed(line)]
    decoder.finish()
    result = decoder.result()
    assert deltas == ["Hel", "lo [1]"]
    assert (result.content, result.finish_reason, result.id, result.model) == ("Hello [1]", "stop", "c1", "m")
    assert result.citations[0].doc_id == "d" and result.citations[0].model_extra == {"slide": 3}
    assert result.retrieval is not None and result.retrieval.query == "q"
    assert decoder.search_id == result.search_id == SEARCH_ID


def test_the_whole_answer_carries_the_search_id_and_plain_chat_none() -> None:
    grounded = chat_result({"id": "c1", "model": "m", "choices": [{"message": {"content": "Hi [1]"}}],
                            "ragserve": {"search_id": SEARCH_ID, "citations": [CITATION], "retrieval": None}})
    plain = chat_result({"id": "c2", "model": "m", "choices": [{"message": {"content": "Hi"}}]})
    assert (grounded.search_id, grounded.citations[0].id) == (SEARCH_ID, "p")
    assert plain.search_id is None


def test_an_error_event_raises_its_type_and_a_cut_stream_is_refused() -> None:
    decoder = ChatStreamDecoder()
    decoder.feed(_chunk("a"))
    with pytest.raises(Timeout) as timed_out:
        decoder.feed('data: {"error": {"type": "upstream_error", "code": "upstream_timeout", "message": "slow"}}')
    assert (timed_out.value.status_code, timed_out.value.message) == (None, "slow")
    with pytest.raises(ConnectionFailed):
        decoder.finish()  # no [DONE]
