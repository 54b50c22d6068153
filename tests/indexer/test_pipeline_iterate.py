"""The pipeline pulls its blocking document generator from a thread in slices: every item arrives, in order,
in fewer thread hops than items, and a generator that fails mid-slice still delivers what came before it."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from indexer import pipeline
from indexer.pipeline import _iterate_in_thread


async def test_every_item_in_order_in_slices() -> None:
    hops: list[int] = []

    def gen() -> Iterator[int]:
        for i in range(1000):
            hops.append(threading.get_ident())
            yield i

    got = [item async for item in _iterate_in_thread(gen())]
    assert got == list(range(1000))
    assert threading.get_ident() not in hops  # made in the pool's threads, never on the loop's


async def test_a_failure_comes_after_the_items_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "THREAD_HOP_ITEMS", 4)

    def gen() -> Iterator[int]:
        yield from range(6)
        raise RuntimeError("disk went away")

    got: list[int] = []
    with pytest.raises(RuntimeError, match="disk went away"):
        async for item in _iterate_in_thread(gen()):
            got.append(item)
    assert got == [0, 1, 2, 3, 4, 5]


async def test_hops_are_slices_not_items(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    real = pipeline.asyncio.to_thread

    async def counting(fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(pipeline.asyncio, "to_thread", counting)
    monkeypatch.setattr(pipeline, "THREAD_HOP_S", 60.0)  # slices cut by count only, however loaded the machine
    got = [item async for item in _iterate_in_thread(iter(range(640)))]
    assert got == list(range(640))
    assert calls == 11  # ten slices of 64 and the empty one that ends it
