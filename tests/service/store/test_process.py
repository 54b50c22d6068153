"""The embedded store behind its process boundary (``ProcessStore``): the child never outlives its parent, a
parent killed with SIGKILL loses none of its acknowledged writes, and the folder opens again at once; while the
child works, the parent's event loop keeps its beat (``tests.support.heartbeat``: the kernel's run-queue wait taken out)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import pytest

from service.store.child import serve_connection
from service.store.edge import EdgeStore
from service.store.errors import CollectionNotFound
from service.store.framing import _describe_exception, _f32, _rebuild, _Receiver, _Sender
from service.store.proxy import ProcessStore
from service.store.types import Chunk
from tests.support.heartbeat import Heartbeat
from tests.support.tiers import patient

WRITER = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    import numpy as np
    from service.store.proxy import ProcessStore
    from service.store.types import Chunk

    async def main():
        store = await ProcessStore.open(Path(sys.argv[1]))
        await store.create_collection("c", dimensions=16, model="m")
        rng = np.random.default_rng(7)
        for batch in range(1000):
            chunks = [Chunk(f"d{batch}-{i}", 0, f"text {batch} {i}", {}, content_hash="h", chunk_count=1,
                            source="s") for i in range(50)]
            await store.upsert("c", chunks, rng.normal(size=(50, 16)).astype(np.float32).tolist())
            print(batch, store._process.pid, flush=True)  # acknowledged
    asyncio.run(main())
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _kill_the_writer_midway(root: Path) -> tuple[int, int]:
    """Run WRITER, SIGKILL it after 20 acknowledged batches; (last acknowledged batch, its store child's pid)."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[3])
    assert proc.stdout is not None
    acked, child = -1, 0
    while acked < 20:
        line = proc.stdout.readline()
        assert line, "the writer ended before 20 batches"
        acked, child = (int(x) for x in line.split())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with proc.stdout:
        for line in proc.stdout:  # batches acknowledged before the kill landed
            acked = int(line.split()[0])
    # The child sees its parent gone (its socket closes) and exits: another process's exit, polled. If it never
    # does, the bound runs out and the caller's assertion that it is gone fails.
    deadline = time.monotonic() + patient(120)
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    return acked, child


async def test_a_killed_parent_leaves_no_child_and_loses_no_acknowledged_write(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    acked, child = _kill_the_writer_midway(root)
    assert not _alive(child), "the store's child outlived its parent"
    store = await EdgeStore.open(root)  # the lock is free again
    try:
        states = await store.doc_states("c")
    finally:
        await store.aclose()
    expected = {f"d{b}-{i}" for b in range(acked + 1) for i in range(50)}
    assert expected <= set(states)  # every acknowledged write is there (the batch in flight may be too)
    assert set(states) - expected <= {f"d{acked + 1}-{i}" for i in range(50)}


@pytest.mark.soak  # a stall bound measures the machine; the gate's twin: /health answers while a store call blocks
async def test_the_loop_keeps_its_beat_while_the_child_writes_and_flushes(tmp_path: Path,
                                                                         soak_figures: Callable[..., None]) -> None:
    """200,000 x 256 points written and flushed through the proxy: the engine holds the child's GIL, never ours.

    The objects this test process already holds (pytest and every imported module, about 225,000) are moved out of
    the collector's reach first, as ``ragserve serve`` and ``ragserve worker`` do after start-up
    (``freeze_startup_objects``): a full collection walking them took 241 ms on the loop, a stall this test would
    otherwise pin on the store."""
    gc.collect()
    gc.freeze()
    store = await ProcessStore.open(tmp_path / "qdrant", write_batch=512)
    heart, done = Heartbeat(), asyncio.Event()
    try:
        await store.create_collection("c", dimensions=256, model="m")
        task = asyncio.create_task(heart.run(done))
        rng = np.random.default_rng(3)
        for batch in range(40):
            chunks = [Chunk(f"d{batch}-{i}", 0, "t", {}, content_hash="h", chunk_count=1, source="s")
                      for i in range(1000)]
            matrix = rng.normal(size=(1000, 256)).astype(np.float32)
            await store.upsert("c", chunks, matrix)  # type: ignore[arg-type]  # an array crosses as it is
        await store.flush()
        done.set()
        await task
        assert await store.count("c") == 40_000
    finally:
        await store.aclose()
        gc.unfreeze()
    if heart.beats:
        soak_figures("store_process.worst_stall_ms", heart.stalls()[-1][0] * 1000, "ms", "lower", tolerance=0.5,
                     slack=10)
    assert len(heart.beats) > 50
    assert heart.stalls()[-1][0] < 0.1, heart.worst()


async def test_a_search_is_answered_where_its_request_is_read_with_the_hits_of_the_async_path(tmp_path: Path) -> None:
    """The store process answers ``query_rows`` in the receiver's callback (an inline store waits for nothing):
    no task per search, the rows the async path gives, and a failure rebuilt on the caller's side as it was
    raised there."""
    store = await EdgeStore.open(tmp_path, inline=True)
    await store.create_collection("kb", dimensions=8, model="m")
    rng = np.random.default_rng(3)
    chunks = [Chunk(f"d{i}", 0, f"text {i}", {"n": i}, content_hash="h", chunk_count=1, source="s")
              for i in range(20)]
    await store.upsert("kb", chunks, rng.normal(size=(20, 8)).astype(np.float32).tolist())
    vector = rng.normal(size=8).astype(np.float32).tolist()
    expected = await store.query_rows("kb", dense=np.frombuffer(_f32(vector), "<f4").tolist(), limit=5)
    try:
        missing = await store.query_rows("nope", dense=vector, limit=5)
    except CollectionNotFound as exc:
        missing_error = _describe_exception(exc)
    else:
        raise AssertionError(f"a search of a missing collection answered {missing}")

    ours, theirs = socket.socketpair()
    loop = asyncio.get_running_loop()
    tasks: list[object] = []
    real = loop.create_task

    def counting(coro, **kwargs):  # type: ignore[no-untyped-def]
        tasks.append(coro.__qualname__)
        return real(coro, **kwargs)

    serving = asyncio.create_task(serve_connection(store, Connection(theirs.detach()), shared=True))
    await asyncio.sleep(0)  # the server's receiver is reading
    replies: list[tuple[int, bool, object]] = []
    both = asyncio.Event()

    def on_reply(reply: tuple[int, bool, object]) -> None:
        replies.append(reply)
        if len(replies) == 2:
            both.set()

    conn = Connection(ours.detach())
    receiver, sender = _Receiver(conn, on_reply, lambda: None), _Sender(conn)
    loop.create_task = counting  # type: ignore[method-assign]
    try:
        await sender.send((1, "query_rows", ("kb",), {"dense": _f32(vector), "limit": 5}))
        await sender.send((2, "query_rows", ("nope",), {"dense": _f32(vector), "limit": 5}))
        await asyncio.wait_for(both.wait(), 60)
    finally:
        loop.create_task = real  # type: ignore[method-assign]
    assert [t for t in tasks if str(t).startswith("serve_connection")] == []  # wait_for's own task aside
    assert sorted(replies, key=lambda r: r[0])[0] == (1, True, expected)
    rid, ok, error = sorted(replies, key=lambda r: r[0])[1]
    assert (rid, ok) == (2, False)
    rebuilt = _rebuild(error)  # type: ignore[arg-type]
    assert type(rebuilt) is CollectionNotFound and str(rebuilt) == str(_rebuild(missing_error))
    receiver.close()
    sender.close(wait=True)
    conn.close()
    await asyncio.wait_for(serving, 60)
    await store.aclose()


def test_a_query_vector_crosses_the_pipe_as_numpys_float32_bytes() -> None:
    """``struct`` packs a list; numpy's bytes are the reference, for ordinary values, the float32 edge cases
    and values float32 cannot hold (numpy makes them infinite, ``struct`` refuses them: numpy answers)."""
    rng = np.random.default_rng(11)
    cases = [
        rng.normal(size=1024).tolist(),
        [0.0, -0.0, 1e-45, -1e-45, 1e-40, 3.4028234663852886e38, -3.4028234663852886e38, float("inf"),
         float("-inf"), 0.1, 1 / 3],
        [1e39, 1.0, -1e300],
        [1, 2, 3],
        rng.normal(size=16).astype(np.float32),
    ]
    with np.errstate(over="ignore"):  # numpy warns as it makes 1e39 infinite, in both
        for vector in cases:
            assert _f32(vector) == np.asarray(vector, dtype="<f4").tobytes()
    nan = _f32([float("nan")])
    assert np.isnan(np.frombuffer(nan, "<f4")[0])
