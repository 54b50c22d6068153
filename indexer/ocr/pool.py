"""Worker processes for rendering and OCR: at most ``workers`` at once, each under an address-space limit, a
page cut off at its timeout.

Why processes, not threads: a page is untrusted input to two native libraries (PDFium, Tesseract) and to Pillow's
decoders. In a process of its own a decompression bomb meets ``RLIMIT_AS`` (the allocation fails, the page fails,
the indexer does not swap or get OOM-killed), a crash of the renderer loses one page, and a page that runs too
long is stopped by killing its worker's process group (Tesseract, a child, with it), which no thread allows.

Each worker is a fresh interpreter (``python -m indexer.ocr.pool``: nothing of the parent's threads or sockets,
and unlike multiprocessing's ``spawn`` it never re-imports the parent's main script), started lazily on the first
page it is given and kept for the next; it talks to the parent over a pair of pipes (pickled calls from the
indexer itself, never from a file). One worker one that timed out, died or ran out of memory is replaced
on the next page. A page's own failure (a corrupt image, an engine error) leaves its worker in place.

Calls block; the indexer's reader thread makes them, one file at a time, with up to ``workers`` pages of that
file in flight (:meth:`WorkerPool.map`), so the event loop never waits on a page.
"""

from __future__ import annotations

import os
import queue
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from indexer.ocr.errors import OcrError, OcrFailed, OcrTimeout

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0
"""How long a new worker may take to start (an interpreter, the OCR modules imported) before its first page: a
liveness bound, kept apart from the page timeout so that a slow start on a loaded host never fails a page."""


class _Lost(OcrFailed):
    """The page failed and took its worker with it (died, or out of memory): the worker is replaced."""


class _Worker:
    def __init__(self, memory_bytes: int) -> None:
        from_parent, to_child = os.pipe()  # (read end, write end)
        from_child, to_parent = os.pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "indexer.ocr.pool", str(from_parent), str(to_parent), str(memory_bytes)],
                pass_fds=(from_parent, to_parent), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                start_new_session=True, env=env,
            )
        except BaseException:
            os.close(to_child)
            os.close(from_child)
            raise
        finally:
            os.close(from_parent)
            os.close(to_parent)
        self._send = Connection(to_child, readable=False)
        self._recv = Connection(from_child, writable=False)
        self._started = False

    def call(self, fn: Callable[..., T], args: tuple[Any, ...], timeout_s: float) -> T:
        """The result; raises for a page that failed (:class:`_Lost` when the worker went with it). ``timeout_s``
        bounds the page alone: a new worker's start (an interpreter, the OCR modules imported) is waited for first,
        under :data:`START_TIMEOUT_S`."""
        self._wait_started()
        try:
            self._send.send((fn, args))
        except OSError:
            raise _Lost(f"the OCR worker died (exit code {self.process.poll()})") from None
        if not self._recv.poll(timeout_s):
            raise OcrTimeout(f"took longer than {timeout_s:g} s (RAGSERVE_OCR__PAGE_TIMEOUT_S)")
        try:
            status, value = self._recv.recv()
        except (EOFError, OSError):
            try:
                code: int | None = self.process.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            why = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            raise _Lost(f"the OCR worker died ({why})") from None
        if status == "ok":
            return value  # type: ignore[no-any-return]
        if status == "memory":
            raise _Lost(f"needs more memory than the OCR worker's limit ({value}; RAGSERVE_OCR__WORKER_MEMORY_MB)")
        raise OcrFailed(value)

    def _wait_started(self) -> None:
        if self._started:
            return
        if not self._recv.poll(START_TIMEOUT_S):
            raise _Lost(f"the OCR worker did not start within {START_TIMEOUT_S:g} s")
        try:
            ready = self._recv.recv()
        except (EOFError, OSError):
            raise _Lost(f"the OCR worker exited as it started (exit code {self.process.poll()})") from None
        if ready != ("ready", None):
            raise _Lost(f"the OCR worker started with {ready!r} instead of its ready message")
        self._started = True

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the worker leads its own group: Tesseract goes too
        except (ProcessLookupError, PermissionError):
            self.process.kill()
        self.process.wait()
        self._send.close()
        self._recv.close()


class WorkerPool:
    def __init__(self, workers: int, memory_mb: int, timeout_s: float) -> None:
        self.workers = workers
        self.memory_bytes = memory_mb * 1024 * 1024
        self.timeout_s = timeout_s
        self._slots: queue.SimpleQueue[_Worker | None] = queue.SimpleQueue()
        for _ in range(workers):
            self._slots.put(None)  # a slot whose worker is started on first use
        self._closed = False

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker (``fn`` a module-level function, its arguments picklable); waits for a free
        worker. Raises :class:`OcrTimeout` or :class:`OcrFailed`."""
        if self._closed:
            raise OcrFailed("the OCR pool is closed")
        worker = self._slots.get()
        try:
            if worker is None:
                worker = _Worker(self.memory_bytes)
            return worker.call(fn, args, self.timeout_s)
        except OcrFailed as exc:
            if isinstance(exc, _Lost):
                worker.kill()
                worker = None
            raise
        except BaseException:  # a timeout, or the caller interrupted: the worker may be mid-page
            if worker is not None:
                worker.kill()
            worker = None
            raise
        finally:
            self._slots.put(worker)

    def map(self, fn: Callable[..., T], calls: Sequence[tuple[Any, ...]], labels: Sequence[str]) -> list[T]:
        """``fn(*args)`` for every ``args``, up to ``workers`` at once, results in order. After a failure, calls
        not yet started are dropped, those running end, and the failure of the earliest call is raised, its
        message led by that call's label (``page 7: ...``)."""
        with ThreadPoolExecutor(min(self.workers, max(len(calls), 1)), thread_name_prefix="ragserve-ocr") as threads:
            futures = [threads.submit(self.run, fn, *args) for args in calls]
            wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                future.cancel()
            wait(futures)
            for label, future in zip(labels, futures, strict=True):
                exc = None if future.cancelled() else future.exception()
                if isinstance(exc, OcrError):
                    raise type(exc)(f"{label}: {exc}") from None
                if exc is not None:
                    raise exc
            return [f.result() for f in futures]

    def close(self) -> None:
        """Stop every worker (pages in flight fail)."""
        self._closed = True
        for _ in range(self.workers):
            try:
                worker = self._slots.get_nowait()
            except queue.Empty:
                break
            if worker is not None:
                worker.kill()


def _serve(recv: Connection, send: Connection, memory_bytes: int) -> None:
    """A worker's loop: one call at a time until the parent closes its end."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes the pipes
    import indexer.ocr.pages  # noqa: F401 - imported before the first page, so its time is not the page's
    send.send(("ready", None))
    while True:
        try:
            fn, args = recv.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[str, Any] = ("ok", fn(*args))
        except MemoryError:
            reply = ("memory", f"{memory_bytes // 2**20} MB")
        except OcrError as exc:
            reply = ("error", str(exc))
        except Exception as exc:  # noqa: BLE001 - a corrupt page is that page's error, reported by type
            reply = ("error", f"{type(exc).__name__}: {exc}")
        try:
            send.send(reply)
        except MemoryError:
            send.send(("memory", f"{memory_bytes // 2**20} MB"))


if __name__ == "__main__":  # a worker, started by _Worker
    _serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False),
           int(sys.argv[3]))
