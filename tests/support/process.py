"""``ragserve serve`` as its own process on a loopback port, for the fuzz and load tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.runners import free_port
from tests.support.tiers import patient

ROOT = Path(__file__).resolve().parents[2]
KEY = "proc-key-0123456789abcdef"


@dataclass(frozen=True)
class ServeProcess:
    url: str
    key: str
    pid: int
    log: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@contextmanager
def ragserve_serve(data_dir: Path, embed_url: str, env: Mapping[str, str] | None = None,
                   timeout_s: float = 120.0, *, with_worker: bool = True, workers: int = 1) -> Iterator[ServeProcess]:
    """Start ``python -m service.cli serve [--with-worker] [--workers N]`` (the minilm profile, the embedded store
    under ``data_dir``), wait for ``/health``, stop it with SIGTERM on exit (SIGKILL after 20 s)."""
    port = free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / "serve.log"
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RAGSERVE_")},
        "PYTHONPATH": str(ROOT), "RAGSERVE_PROFILE": "minilm", "RAGSERVE_API_KEYS": KEY,
        "RAGSERVE_RUNNERS__EMBED_URL": embed_url, "RAGSERVE_DATA_DIR": str(data_dir),
        "RAGSERVE_HOST": "127.0.0.1", "RAGSERVE_PORT": str(port), **(env or {}),
    }
    with open(log, "ab") as out:
        command = [sys.executable, "-m", "service.cli", "serve", *(["--with-worker"] if with_worker else []),
                   *(["--workers", str(workers)] if workers != 1 else [])]
        proc = subprocess.Popen(command, cwd=ROOT,
                                env=full_env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + patient(timeout_s)  # a liveness bound only: another process's /health
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"ragserve serve exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"ragserve serve did not answer /health in {timeout_s}s")
            time.sleep(0.3)
        yield ServeProcess(url, KEY, proc.pid, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set size so far (VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the API and, by default, its embedded store's own process), from /proc."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    todo += [int(child) for child in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return pids


def _sum_status(pids: list[int], field: str) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue  # gone meanwhile (or a zombie, which holds no memory)
    return total


def tree_rss_bytes(pid: int) -> int:
    """Resident set size of a process and its descendants together."""
    return _sum_status(process_tree(pid), "VmRSS:")


def tree_peak_rss_bytes(pid: int) -> int:
    """The sum of each process's own peak (VmHWM) over a process and its descendants: an upper bound of the
    tree's peak, since their peaks need not have come at the same moment."""
    return _sum_status(process_tree(pid), "VmHWM:")
