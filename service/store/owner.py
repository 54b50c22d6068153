"""The store owner: one embedded Qdrant Edge store that several API processes share, over a Unix socket.

``ragserve serve --workers N`` (N > 1) on the embedded store: the folder's lock admits one process, so the
supervising ``serve`` process starts one owner (``python -m service.store.owner``) before it starts its API
processes. The owner opens the store (taking the folder's lock and keeping it), listens on :data:`SOCKET_NAME` in
the store folder (mode 0600: the user that runs ``serve`` only), and answers each connection with the protocol of
:mod:`service.store.child` (each API process attaches with :meth:`ProcessStore.attach`). A peer's ``aclose``
ends its connection, never the store; a peer that dies (SIGKILL) only closes its connection, its calls in flight
finish or fail alone in the owner.

Lifetime: the owner holds one end of a socket pair whose other end is its supervisor's (:class:`StoreOwner`),
as the one-to-one child holds its parent's pipe. When the supervisor closes it, or dies, the owner stops
accepting, waits for the calls in flight, flushes, releases the lock, removes its socket and exits. Where the
owner dies, the API processes answer 503 ``store_unavailable`` and :class:`StoreOwner` starts the next one
(after a pause that doubles to 30 s while starts keep failing); the API processes connect again on their next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from service.store.child import serve_connection
from service.store.framing import _describe_exception, _rebuild
from service.store.proxy import START_TIMEOUT_S, short_path, spawn_piped

log = logging.getLogger("ragserve.store")

SOCKET_NAME = ".owner.sock"
RESTART_PAUSE_S = 1.0
RESTART_PAUSE_MAX_S = 30.0


def socket_path(root: Path) -> Path:
    """Where the owner of the store folder ``root`` listens."""
    return root / SOCKET_NAME


class StoreOwner:
    """The supervisor's side: start the owner (:meth:`start`, which waits until it listens or raises what refused
    it: :class:`~service.store.errors.StoreLocked` ...), start it again when it dies, stop it (:meth:`stop`)."""

    def __init__(self, root: Path, kwargs: dict[str, Any]) -> None:
        self.root = root
        self.socket = socket_path(root)
        self._kwargs = kwargs
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        self._spawn()
        self._watcher = threading.Thread(target=self._watch, name="store-owner-watch", daemon=True)
        self._watcher.start()

    def _spawn(self) -> None:
        process, conn = spawn_piped("service.store.owner", str(self.root), str(self.socket), json.dumps(self._kwargs))
        try:
            if not conn.poll(START_TIMEOUT_S):
                raise TimeoutError(f"the store owner did not start in {START_TIMEOUT_S:g}s")
            kind, value = conn.recv()
        except BaseException:
            conn.close()
            process.kill()
            process.wait()
            raise
        if kind != "ready":
            conn.close()
            process.wait()
            raise _rebuild(value)
        with self._lock:
            self._process, self._conn = process, conn
        log.info("store owner %d listening at %s", process.pid, self.socket)

    def _watch(self) -> None:
        pause = RESTART_PAUSE_S
        while not self._stopping.is_set():
            process = self._process
            assert process is not None
            code = process.wait()
            if self._stopping.is_set():
                return
            log.error("the store owner %d exited with %s; the API answers 503 store_unavailable until the next "
                      "one listens", process.pid, code)
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
            while not self._stopping.wait(pause):
                try:
                    self._spawn()
                    pause = RESTART_PAUSE_S
                    break
                except Exception as exc:  # noqa: BLE001 - keep trying: the API processes wait on it
                    pause = min(pause * 2, RESTART_PAUSE_MAX_S)
                    log.error("starting the store owner again failed: %s; next try in %.0fs", exc, pause)

    def stop(self, timeout_s: float = 120.0) -> None:
        """Close the owner's pipe (it finishes its calls, flushes, releases the lock, exits) and wait for it."""
        self._stopping.set()
        with self._lock:
            process, conn = self._process, self._conn
            self._conn = None
        if conn is not None:
            conn.close()
        if process is not None:
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("the store owner %d did not exit in %.0fs: killed", process.pid, timeout_s)
                process.kill()
                process.wait()
        if self._watcher is not None:
            self._watcher.join(timeout=5)


# --- the owner process -----------------------------------------------------------------------------------------

def _listen(path: Path) -> socket.socket:
    """A listening Unix socket at ``path``, mode 0600 before anyone can connect: bound under a temporary name,
    its mode set, then renamed into place (over a stale socket a killed owner left; the folder's lock, held,
    says no other owner uses it)."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(short_path(temporary))
        os.chmod(temporary, 0o600)
        sock.listen(128)
        os.replace(temporary, path)
    except BaseException:
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
    sock.setblocking(False)
    return sock


async def _own(control: Connection, root: Path, path: Path, kwargs: dict[str, Any]) -> None:
    from service.store.edge import EdgeStore

    try:
        store = await EdgeStore.open(root, **kwargs, inline=True)  # see EdgeStore._run: the owner's engine calls
    except BaseException as exc:  # noqa: BLE001 - the supervisor raises it (StoreLocked, LegacyStoreLayout ...)
        with contextlib.suppress(OSError):
            control.send(("refused", _describe_exception(exc)))
        return
    loop = asyncio.get_running_loop()
    sessions: set[asyncio.Task[None]] = set()
    listener: socket.socket | None = None
    ended = asyncio.Event()
    watched = socket.socket(fileno=os.dup(control.fileno()))

    def control_readable() -> None:
        try:
            data = watched.recv(1, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the supervisor closed its end, or died
            loop.remove_reader(watched.fileno())
            ended.set()

    async def accept() -> None:
        assert listener is not None
        while True:
            peer, _ = await loop.sock_accept(listener)
            peer.setblocking(True)
            task = asyncio.create_task(serve_connection(store, Connection(peer.detach()), shared=True))
            sessions.add(task)
            task.add_done_callback(sessions.discard)

    try:
        listener = _listen(path)
        control.send(("ready", os.getpid()))
        loop.add_reader(watched.fileno(), control_readable)
        acceptor = asyncio.create_task(accept())
        await ended.wait()
        acceptor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await acceptor
    finally:
        if listener is not None:
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # a few microseconds; the loop serves no one any more
        for task in list(sessions):
            task.cancel()  # a session's own finally waits for its calls in flight
        await asyncio.gather(*sessions, return_exceptions=True)
        try:
            await store.aclose()  # flushes and releases the folder's lock
        except Exception as exc:  # noqa: BLE001 - closing must not raise past this point
            log.warning("closing the embedded store: %s", exc)
        watched.close()


def _owner_main(control: Connection, root: str, path: str, kwargs: dict[str, Any]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the supervisor stops us
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(_own(control, Path(root), Path(path), kwargs))
    finally:
        control.close()


if __name__ == "__main__":  # python -m service.store.owner FD ROOT SOCKET KWARGS_JSON
    _owner_main(Connection(int(sys.argv[1])), sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
