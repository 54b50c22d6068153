"""The store owner (``service.store.owner``): one embedded store that several processes' ``ProcessStore.attach``
share over a Unix socket. What one writes the other reads, settings included (nothing stale is cached); one peer's
close leaves the store to the others; a second owner is refused the folder; the socket is the user's alone; an
owner killed with SIGKILL answers 503 (``StoreError``) until the supervisor's next owner listens, and then the same
peers go on with every acknowledged write there; a stopped owner leaves the folder free and no socket behind."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
from pathlib import Path

import numpy as np
import pytest

from service.store.errors import StoreError, StoreLocked
from service.store.layout import probe_store
from service.store.owner import StoreOwner
from service.store.proxy import ProcessStore
from service.store.types import Chunk
from tests.support.waiting import until_async

pytestmark = pytest.mark.timeout(300)


def chunks(n: int, prefix: str) -> list[Chunk]:
    return [Chunk(f"{prefix}{i}", 0, f"text {i}", {}, content_hash="h", chunk_count=1, source="s") for i in range(n)]


async def test_two_peers_share_one_owner_which_restarts_after_sigkill(tmp_path: Path) -> None:
    root = tmp_path / ("deep-" * 12) / "qdrant"  # its socket's path is past what a Unix address holds
    assert len(str(root / ".owner.sock")) > 107
    owner = StoreOwner(root, {"write_batch": 16})
    await asyncio.to_thread(owner.start)
    try:
        assert stat.S_IMODE(os.stat(owner.socket).st_mode) == 0o600
        with pytest.raises(StoreLocked):
            await asyncio.to_thread(StoreOwner(root, {}).start)

        a = await ProcessStore.attach(root, owner.socket)
        b = await ProcessStore.attach(root, owner.socket)
        vectors = np.random.default_rng(3).normal(size=(40, 8)).astype(np.float32)
        await a.create_collection("c", dimensions=8, model="m")
        await a.upsert("c", chunks(40, "d"), vectors)
        assert await b.count("c") == 40
        assert (await a.describe("c")).dimensions == 8
        await b.delete_collection("c")
        await b.create_collection("c", dimensions=4, model="m")
        assert (await a.describe("c")).dimensions == 4  # the other peer's change, not a cached answer
        await b.upsert("c", chunks(30, "e"), vectors[:30, :4])

        await a.aclose()
        assert await b.count("c") == 30  # a peer's close ends its connection only

        first = owner.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        with pytest.raises(StoreError):
            for _ in range(1000):  # the loss shows on a call once the owner's end of the socket is closed
                await b.count("c")
        assert await b.ping() is False or owner.pid != first  # down, unless the next owner already listens

        async def answered() -> int | None:
            try:
                return await b.count("c")
            except StoreError:
                return None

        assert await until_async(answered, "the next owner answers the same peer", 120) == 30
        assert owner.pid != first
        await b.aclose()
    finally:
        await asyncio.to_thread(owner.stop)
    assert not owner.socket.exists()
    probe_store(root)  # the folder's lock is free again
