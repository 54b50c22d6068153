"""Keep the runners up: one that exits while it should be running is restarted, with backoff, and logged.

Each runner gets a watcher thread. When its process has exited (a crash, an OOM kill, ``kill -9``), the
watcher kills what is left of its process group (vLLM's engine-core child would otherwise keep the memory),
waits the backoff (1 s, doubling up to ``max_backoff_s``; back to 1 s once a runner stayed up ``stable_s``),
starts it again with the same command line and waits for its ``/health``. A runner that comes back unhealthy
is killed and tried again with the next backoff. Meanwhile ragserve's runner clients answer 503 with
``Retry-After`` for queries and hold bulk (indexing) calls until the runner answers again.

Each restart is started by the runner's own watcher thread: ``PR_SET_PDEATHSIG`` (set in the child) fires when
the *thread* that forked it ends, and the watcher lives exactly as long as the supervision.

The supervisor's time is injectable: ``clock`` (how long a runner stayed up) and ``wait_backoff`` (the wait
before a restart). Tests step both; production uses ``time.monotonic`` and the stop event's own wait.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from service.runners.launcher import RunnerProcess, RunnerSpec, RunnerStartError, running

log = logging.getLogger("ragserve.runners")


@dataclass(frozen=True)
class RestartPolicy:
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    stable_s: float = 120.0
    """A runner up this long has its backoff reset."""
    startup_timeout_s: float = 600.0
    poll_s: float = 0.5


@contextmanager
def supervised(specs: Sequence[RunnerSpec], *, log_dir: Path, timeout_s: float = 600.0,
               sequential: bool | None = None, check: bool = True,
               restart: RestartPolicy | None = None,
               wait_backoff: Callable[[float], bool] | None = None) -> Iterator[list[RunnerProcess]]:
    """:func:`~service.runners.launcher.running`, with a runner that exits meanwhile restarted with backoff and
    logged (``restart`` tunes it; ``wait_backoff`` as :class:`Supervisor` takes it). The supervisor stops first on
    exit: nothing is restarted while it stops."""
    with running(specs, log_dir=log_dir, timeout_s=timeout_s, sequential=sequential, check=check) as processes:
        supervisor = Supervisor(processes, restart or RestartPolicy(startup_timeout_s=timeout_s),
                                wait_backoff=wait_backoff)
        supervisor.start()
        try:
            yield processes
        finally:
            supervisor.stop()


class Supervisor:
    def __init__(self, processes: Sequence[RunnerProcess], policy: RestartPolicy | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 wait_backoff: Callable[[float], bool] | None = None) -> None:
        """``wait_backoff(seconds)``: wait before a restart, True when stopped meanwhile (default: wait on the
        stop event; ``stop()`` ends the wait)."""
        self.processes = list(processes)
        self.policy = policy or RestartPolicy()
        self._stop = threading.Event()
        self._clock = clock
        self._wait_backoff = wait_backoff or self._stop.wait
        self._threads = [
            threading.Thread(target=self._watch, args=(p,), name=f"supervise-{p.spec.label}", daemon=True)
            for p in self.processes
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop watching (restarts in progress are abandoned); the caller then stops the processes."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _watch(self, runner: RunnerProcess) -> None:
        policy = self.policy
        backoff = policy.initial_backoff_s
        up_since: float | None = self._clock()  # when the process came up healthy; None after a failed start
        while not self._stop.wait(policy.poll_s):
            process = runner.process
            code = process.poll() if process is not None else -1
            if code is None:
                continue
            if up_since is not None and self._clock() - up_since >= policy.stable_s:
                backoff = policy.initial_backoff_s  # it had stayed up: a new failure, not a crash loop
            up_since = None
            runner.restarts += 1
            log.error("%s runner (pid %s) exited with %s; restarting it in %gs (restart %d)",
                      runner.spec.label, process.pid if process else "?", code, backoff, runner.restarts)
            runner.kill_group()
            if self._wait_backoff(backoff) or self._stop.is_set():
                return
            backoff = min(backoff * 2, policy.max_backoff_s)
            started = self._clock()
            try:
                runner.start(append_log=True)
                # The launcher's health deadline is on the real monotonic clock.
                runner.wait_healthy(time.monotonic() + policy.startup_timeout_s, stop=self._stop)
            except RunnerStartError as exc:
                if self._stop.is_set():
                    return
                log.error("%s runner did not come back: %s", runner.spec.label, str(exc).splitlines()[0])
                runner.kill_group()  # seen as exited on the next poll: tried again after the next backoff
                continue
            up_since = self._clock()
            assert runner.process is not None
            log.warning("%s runner is back (pid %d, healthy after %.0fs; %d restart(s) so far)",
                        runner.spec.label, runner.process.pid, up_since - started, runner.restarts)
