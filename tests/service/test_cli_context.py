"""``ragserve context``: the context on stdout, byte for byte what /v1/context answers; sources and the search id
(for ``ragserve feedback``) on stderr."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx

from service.config import Settings
from tests.support.app import API_KEY
from tests.support.server import live_server

DOCS = [{"id": "espresso", "text": "Espresso forces hot water through finely ground coffee. It takes 25 seconds."},
        {"id": "espresso-copy", "text": "Espresso forces hot water through finely ground coffee. It takes 25 seconds."},
        {"id": "tea", "text": "Green tea is steeped at about eighty degrees."}]


def test_the_cli_prints_the_context_and_its_sources(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        assert httpx.post(f"{url}/v1/collections", headers=headers, json={"name": "kb"}).status_code == 201
        r = httpx.post(f"{url}/v1/collections/kb/documents", headers=headers, json={"documents": DOCS}, timeout=60)
        assert r.status_code == 200, r.text
        expected = httpx.post(f"{url}/v1/context", headers=headers, timeout=60, json={
            "collection": "kb", "query": "how is espresso made?", "budget_tokens": 200}).json()
        done = subprocess.run([sys.executable, "-m", "service.cli", "context", "how is espresso made?",
                               "--collection", "kb", "--budget", "200", "--url", url, "--api-key", API_KEY],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected["context"] + "\n"
    lines = done.stderr.strip().splitlines()
    assert lines[0] == f"{expected['tokens']} tokens ({expected['tokenizer']}) for 'how is espresso made?'"
    assert re.fullmatch(r"search_id: s_[0-9a-f]{32}", lines[-1]) and lines[-1] != f"search_id: {expected['search_id']}"
    assert lines[1:-1] == [
        *(f"[{p['number']}] kb/{p['doc_id']}#{p['chunk_indexes'][0]}  {p['tokens']} tokens"
          for p in expected["passages"]),
        *(f"left out kb/{d['doc_id']}#0: {d['reason']}" + (f" (passage [{d['passage']}])" if d["passage"] else "")
          for d in expected["dropped"])]
    assert any(d["reason"] == "duplicate" for d in expected["dropped"])  # the copy is named as left out
