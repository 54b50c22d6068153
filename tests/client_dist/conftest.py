"""The ragserve-client distribution's tests against a live ragserve: RAGSERVE_URL, RAGSERVE_API_KEY (a key that
may create collections) and RAGSERVE_COLLECTION (default ``client-dist``) say which. They import
``ragserve_client`` only, as a chat app does: run them from the client's venv, where ``service`` is not installed
(tests/service/client/test_distribution.py does, against a live app of its own).

The collection is created and seeded here, through the client itself, so a run needs nothing prepared."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from ragserve_client import Client, Document

DOCS = [
    Document("espresso", "Espresso forces hot water through finely ground coffee.", {"tag": "coffee"}),
    Document("tea", "Green tea is steeped at about eighty degrees.", {"tag": "tea"}),
    Document("bread", "Sourdough bread rises with a wild yeast starter.", {"tag": "baking"}),
]
QUERY = "how is espresso made?"


@dataclass(frozen=True)
class Service:
    url: str
    api_key: str
    collection: str


@pytest.fixture(scope="session")
def service() -> Iterator[Service]:
    url, key = os.environ.get("RAGSERVE_URL"), os.environ.get("RAGSERVE_API_KEY")
    if not url or not key:  # a failure, not a skip: a run without a service must not look green
        pytest.fail("set RAGSERVE_URL and RAGSERVE_API_KEY to a live ragserve (and its key)")
    live = Service(url, key, os.environ.get("RAGSERVE_COLLECTION", "client-dist"))
    with Client(live.url, live.api_key) as rs:
        rs.ensure_collection(live.collection, filter_fields={"tag": "keyword"})
        rs.upsert_documents(live.collection, DOCS)  # the same ids replace: a second run finds the same three
    yield live
