"""``ragserve search`` prints its search id, and ``ragserve feedback`` rates a hit of it, as a user runs them."""

from __future__ import annotations

import json
import re

import httpx

from service.config import Settings
from tests.support.app import API_KEY
from tests.support.cli import ragserve
from tests.support.server import live_server

DOCS = [{"id": "espresso", "text": "Espresso forces hot water through finely ground coffee."},
        {"id": "tea", "text": "Green tea is steeped at about eighty degrees."}]
QUERY = "how is espresso made?"


def test_search_prints_its_id_and_feedback_rates_a_hit(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        assert httpx.post(f"{url}/v1/collections", headers=headers, json={"name": "kb"}).status_code == 201
        r = httpx.post(f"{url}/v1/collections/kb/documents", headers=headers, json={"documents": DOCS}, timeout=60)
        assert r.status_code == 200, r.text
        human = ragserve("search", QUERY, "--collection", "kb", url=url)
        found = ragserve("search", QUERY, "--collection", "kb", "--json", url=url)
        hits = json.loads(found.stdout)["hits"]
        search_id = json.loads(found.stdout)["search_id"]
        by_chunk = ragserve("feedback", search_id, "--chunk-id", hits[0]["id"], "--rating", "2", url=url)
        printed_id = human.stdout.splitlines()[-1].removeprefix("search_id: ")
        by_doc = ragserve("feedback", printed_id, "--doc-id", "tea", "--rating", "-1", "--comment", "off topic",
                          "--json", url=url)
        unknown = ragserve("feedback", "s_" + "0" * 32, "--doc-id", "tea", "--rating", "1", url=url)
        too_high = ragserve("feedback", search_id, "--doc-id", "tea", "--rating", "5", url=url)
        both = ragserve("feedback", search_id, "--doc-id", "tea", "--chunk-id", hits[0]["id"], "--rating", "1",
                        url=url)
    assert human.returncode == found.returncode == 0, human.stderr + found.stderr
    assert re.fullmatch(r"search_id: s_[0-9a-f]{32}", human.stdout.splitlines()[-1])
    assert re.fullmatch(r"s_[0-9a-f]{32}", search_id) and printed_id != search_id  # each search its own id
    assert by_chunk.returncode == 0, by_chunk.stderr
    assert by_chunk.stdout == (f"rated kb/espresso (chunk {hits[0]['id']}): 2, counted; the query log is off, so "
                               "not stored\n")
    assert by_doc.returncode == 0, by_doc.stderr
    tea = next(h for h in hits if h["doc_id"] == "tea")
    assert json.loads(by_doc.stdout) == {"search_id": printed_id, "collection": "kb", "chunk_id": tea["id"],
                                         "doc_id": "tea", "rating": -1, "stored": False}
    assert unknown.returncode == 1
    assert unknown.stderr == (f"ragserve: error 404 search_not_found: search 's_{'0' * 32}' is unknown or expired "
                              "(ids live 7 days) (param search_id)\n")
    assert too_high.returncode == 1
    assert too_high.stderr.startswith("ragserve: error 422 rating_out_of_range: ")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr  # argparse: one of the two
