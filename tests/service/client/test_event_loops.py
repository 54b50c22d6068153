"""The async client across event loops (service/client/loops.py): one ``asyncio.run`` after another, as a script,
LangChain's sync-over-async callers and LlamaIndex's async fusion do. Each loop gets its own connections and
closes them as it ends: counted exactly in /proc, before and after (tests/support/descriptors.py), in a process
of its own that holds only the client (the app in the test's process opens and closes descriptors in its own
time, so a count taken beside it is not exact)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from service.client import AsyncClient, Client
from service.config import Settings
from tests.service.client.seed import seed
from tests.support.app import API_KEY
from tests.support.descriptors import connections_to
from tests.support.server import live_server

QUERY = "how is espresso made?"
RUNS = 100
ROOT = Path(__file__).resolve().parents[3]
RUNS_IN_A_PROCESS = """
import asyncio, json, sys
from service.client.langchain import RagserveRetriever
from tests.support.descriptors import connections_to, open_descriptors
url, key, port, runs, query = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
retriever = RagserveRetriever(collection="kb", base_url=url, api_key=key, top_k=1)
first = asyncio.run(retriever.ainvoke(query))  # imports and lazy set-up happen once, before counting
before = open_descriptors(server_port=port)
found = [asyncio.run(retriever.ainvoke(query)) for _ in range(runs)]
after = open_descriptors(server_port=port)
chunks = lambda docs: [(d.id, d.page_content, {k: v for k, v in d.metadata.items() if k != "search_id"}) for d in docs]
print(json.dumps({"first": [d.metadata["doc_id"] for d in first], "same": all(chunks(f) == chunks(first) for f in found),
                  "before": before, "after": after, "connections": connections_to(port)}))
"""


def _seeded(url: str) -> None:
    with Client(url, API_KEY) as rs:  # closed: its connection is not counted below
        seed(rs)


def test_a_hundred_asyncio_runs_leave_no_connection_or_descriptor_behind(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url:
        _seeded(url)
        port = urlsplit(url).port
        assert port is not None
        done = subprocess.run([sys.executable, "-c", RUNS_IN_A_PROCESS, url, API_KEY, str(port), str(RUNS), QUERY],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["first"] == ["espresso"] and seen["same"]
    assert seen["connections"] == 0  # every connection of every loop closed
    assert seen["after"] == seen["before"]  # no descriptor left by any of the runs


def test_aclose_closes_this_loops_connection_and_the_client_stays_usable(minilm_settings: Settings) -> None:
    with live_server(minilm_settings) as url:
        _seeded(url)
        port = urlsplit(url).port
        assert port is not None
        client = AsyncClient(url, API_KEY)

        async def use_close_use() -> list[int]:
            counts = []
            await client.list_collections()
            counts.append(connections_to(port))
            await client.aclose()
            counts.append(connections_to(port))
            await client.list_collections()  # a new pool for this loop
            counts.append(connections_to(port))
            return counts

        counts = asyncio.run(use_close_use())
        left = connections_to(port)
    assert counts == [1, 0, 1]
    assert left == 0  # the loop's end closed the second pool


async def test_one_client_serves_two_loops_at_once(minilm_settings: Settings) -> None:
    """This test's loop and a thread's loop use one AsyncClient side by side; neither borrows the other's pool."""
    with live_server(minilm_settings) as url, Client(url, API_KEY) as rs:
        seed(rs)
        client = AsyncClient(url, API_KEY)
        here = await client.search("kb", QUERY, top_k=1)
        there = await asyncio.to_thread(asyncio.run, client.search("kb", QUERY, top_k=1))
        again = await client.search("kb", QUERY, top_k=1)
        await client.aclose()
    assert [h.id for h in here.hits] == [h.id for h in there.hits] == [h.id for h in again.hits]
