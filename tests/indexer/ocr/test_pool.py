"""The OCR worker pool: a page that hangs is cut off at its timeout, one that needs more memory than the limit
fails, one that crashes its worker fails; each time the worker is replaced and the next page is read. A page's
own error leaves its worker in place. (Calls from tests/support/ocr_tasks.py, run in the workers.)"""

from __future__ import annotations

import os

import pytest

from indexer.ocr.errors import OcrFailed, OcrTimeout
from indexer.ocr.pool import WorkerPool
from tests.support import ocr_tasks


@pytest.fixture
def pool() -> WorkerPool:
    pool = WorkerPool(workers=1, memory_mb=512, timeout_s=60)  # a liveness bound: no claim about speed
    yield pool  # type: ignore[misc]
    pool.close()


def test_a_call_runs_in_a_worker_process_kept_for_the_next(pool: WorkerPool) -> None:
    first = pool.run(ocr_tasks.pid)
    assert first != os.getpid() and pool.run(ocr_tasks.pid) == first


def test_a_hung_page_is_cut_off_and_its_worker_replaced(pool: WorkerPool) -> None:
    pool.timeout_s = 0.5  # a bound on the hang, which never ends by itself: not a claim about speed
    before = pool.run(ocr_tasks.pid)
    with pytest.raises(OcrTimeout, match="took longer than 0.5 s"):
        pool.run(ocr_tasks.hang)
    pool.timeout_s = 60
    after = pool.run(ocr_tasks.pid)
    assert after != before
    with pytest.raises(ProcessLookupError):
        os.kill(before, 0)  # killed, not left running


def test_a_page_over_the_memory_limit_fails_and_the_next_is_read(pool: WorkerPool) -> None:
    with pytest.raises(OcrFailed, match="needs more memory than the OCR worker's limit \\(512 MB"):
        pool.run(ocr_tasks.allocate, 1024)
    assert pool.run(ocr_tasks.allocate, 64) == 64 * 1024 * 1024


def test_a_crashed_worker_fails_its_page_and_is_replaced(pool: WorkerPool) -> None:
    before = pool.run(ocr_tasks.pid)
    with pytest.raises(OcrFailed, match="the OCR worker died \\(killed by signal 9\\)"):
        pool.run(ocr_tasks.die)
    assert pool.run(ocr_tasks.pid) != before


def test_a_page_error_keeps_the_worker(pool: WorkerPool) -> None:
    before = pool.run(ocr_tasks.pid)
    with pytest.raises(OcrFailed, match="^ValueError: a corrupt page$"):
        pool.run(ocr_tasks.fail)
    assert pool.run(ocr_tasks.pid) == before


def test_map_names_the_page_that_failed() -> None:
    pool = WorkerPool(workers=2, memory_mb=512, timeout_s=60)
    try:
        assert pool.map(ocr_tasks.allocate, [(1,), (2,)], ["page 1", "page 2"]) == [2**20, 2**21]
        with pytest.raises(OcrFailed, match="^page 2: ValueError: a corrupt page$"):
            pool.map(ocr_tasks.fail, [(), ()], ["page 2", "page 3"])
    finally:
        pool.close()
