"""Real ``ragserve worker`` processes for tests and benchmarks: each with its own environment (data dir, embedding
URL, queue), its log in a file, and helpers to wait on what it logs."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.waiting import until


@dataclass
class WorkerProcess:
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def id_prefix(self) -> str:
        """The start of the worker id it writes into the queue (``host:pid:random``)."""
        return f"{socket.gethostname()}:{self.proc.pid}:"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_log(self, pattern: str, timeout_s: float) -> re.Match[str]:
        """Until the worker's log holds ``pattern`` (another process's log: nothing to wait on but the file), under a
        liveness bound only; a worker that exits first fails at once."""

        def logged() -> re.Match[str] | None:
            if found := re.search(pattern, self.text()):
                return found
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.text()[-3000:]}")
            return None

        return until(logged, f"the worker logged {pattern!r}", timeout_s)

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM (the running job is handed back), then SIGKILL if it does not exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def start_worker(env: dict[str, str], log: Path, *, ready_timeout_s: float = 120) -> WorkerProcess:
    """Start ``ragserve worker`` with ``env`` on top of this process's environment; return once it polls."""
    with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", "worker"], env={**os.environ, **env},
                                stdout=out, stderr=subprocess.STDOUT)
    worker = WorkerProcess(proc, log)
    try:
        worker.wait_for_log(r"worker \S+ polling", ready_timeout_s)
    except BaseException:
        worker.proc.kill()
        raise
    return worker
