from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.quality.store import LogStore
from service.quality.store_postgres import PostgresLogStore
from service.quality.store_sqlite import SqliteLogStore
from tests.support.postgres import PostgresCluster


@pytest.fixture(params=["sqlite", "postgres"])
async def log_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LogStore]:
    """The log's database on each backend: the contract holds on both."""
    store: LogStore
    if request.param == "sqlite":
        store = SqliteLogStore(tmp_path / "querylog.sqlite3")
    else:
        cluster: PostgresCluster = request.getfixturevalue("postgres")
        store = await PostgresLogStore.open(cluster.create_database())
    try:
        yield store
    finally:
        await store.close()
