"""The supervisor on real processes that cost nothing: a stand-in runner (a Python HTTP server answering
``/health``, which also forks a child the way vLLM's server forks its engine core), started with the
launcher's own process handling. SIGKILL it and the supervisor kills what is left of its group, restarts
it with doubling backoff, logs each step, and the new process answers. (A real vLLM runner killed mid-burst
and mid-job: tests/faults/test_runner_crash.py.)

The supervisor's time is the test's: each backoff is an explicit step (announced with its length, over when
the test releases it) and "how long the runner stayed up" is a clock the test advances, so every backoff is
asserted exactly and nothing depends on how fast this machine restarts a process. The waits that remain are
for events (a new process answering, a log line), bounded by ``LIVENESS_S`` only."""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from service.runners.launcher import RunnerProcess, RunnerSpec, _group_alive, running
from service.runners.supervisor import RestartPolicy, Supervisor, supervised
from tests.support.lease_clock import ManualClock
from tests.support.runners import free_port
from tests.support.tiers import patient

T = TypeVar("T")
LIVENESS_S = 60.0
POLICY = RestartPolicy(initial_backoff_s=0.4, max_backoff_s=5, stable_s=60, startup_timeout_s=LIVENESS_S,
                       poll_s=0.05)

STAND_IN = r'''
import http.server, os, sys, time
port, crash_file = int(sys.argv[1]), sys.argv[2]
if os.fork() == 0:  # the "engine core": lives on after its parent is killed, like vLLM's
    while True:
        time.sleep(1)
if os.path.exists(crash_file):  # a start that fails: exit before listening
    sys.exit(3)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(str(os.getpid()).encode())
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Health).serve_forever()
'''


class StandInSpec(RunnerSpec):
    def __init__(self, script: Path, crash_file: Path) -> None:
        super().__init__("stand-in", "-", "-", "127.0.0.1", free_port())
        self.script, self.crash_file = script, crash_file

    def command(self) -> list[str]:
        return [sys.executable, str(self.script), str(self.port), str(self.crash_file)]


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[tuple[StandInSpec, Path]]:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    yield StandInSpec(script, tmp_path / "fail-next-start"), tmp_path / "logs"


def _answering_pid(url: str) -> int | None:
    try:
        r = httpx.get(f"{url}/health", timeout=0.5)
    except httpx.HTTPError:
        return None
    return int(r.text) if r.status_code == 200 else None


class SteppedBackoff:
    """The supervisor's wait before a restart, as an explicit step: each wait is announced (:meth:`next`
    returns its length) and lasts until the test calls :meth:`release` (or :meth:`close`, at the end)."""

    def __init__(self) -> None:
        self._asked: queue.Queue[float] = queue.Queue()
        self._go = threading.Semaphore(0)
        self._closed = threading.Event()

    def __call__(self, seconds: float) -> bool:
        self._asked.put(seconds)
        self._go.acquire()
        return self._closed.is_set()

    def next(self) -> float:
        """The length of the next backoff the supervisor waits (once it has begun waiting it)."""
        return self._asked.get(timeout=LIVENESS_S)

    def release(self) -> None:
        self._go.release()

    def unasked(self) -> bool:
        return self._asked.empty()

    def close(self) -> None:
        self._closed.set()
        self._go.release(100)


@contextmanager
def stepped(runner: RunnerProcess, clock: ManualClock) -> Iterator[SteppedBackoff]:
    backoff = SteppedBackoff()
    supervisor = Supervisor([runner], POLICY, clock=clock, wait_backoff=backoff)
    supervisor.start()
    try:
        yield backoff
    finally:
        backoff.close()
        supervisor.stop()


def _wait_for(predicate: Callable[[], T | None]) -> T:
    """An event with nothing to wait on but polling: a liveness bound only."""
    deadline = time.monotonic() + patient(LIVENESS_S)
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {LIVENESS_S}s")


def _new_pid(url: str, old: int) -> int:
    """Wait for a process other than ``old`` to answer ``/health``; its pid."""
    return _wait_for(lambda: (p := _answering_pid(url)) and p != old and p)


def _backs(caplog: pytest.LogCaptureFixture) -> int:
    return sum("is back" in r.getMessage() for r in caplog.records)


def test_a_killed_runner_is_restarted_with_doubling_backoff_and_logged(
    stand_in: tuple[StandInSpec, Path], caplog: pytest.LogCaptureFixture
) -> None:
    spec, logs = stand_in
    caplog.set_level(logging.WARNING, logger="ragserve.runners")
    clock = ManualClock()  # never advanced: no runner stays up long enough to reset the backoff
    with running([spec], log_dir=logs, check=False) as (runner,), stepped(runner, clock) as backoff:
        first = runner.process
        assert first is not None and _answering_pid(spec.url) == first.pid
        os.kill(first.pid, signal.SIGKILL)  # the server only: its forked child stays, as vLLM's engine core would
        assert backoff.next() == 0.4
        assert not _group_alive(first.pid), "the dead runner's child was left running"
        assert runner.process is first and _answering_pid(spec.url) is None  # nothing restarted during the backoff
        backoff.release()
        second = _new_pid(spec.url, first.pid)
        _wait_for(lambda: _backs(caplog) == 1)

        spec.crash_file.touch()  # the next start fails: one more backoff, twice as long, then it comes back
        os.kill(second, signal.SIGKILL)
        assert backoff.next() == 0.8
        backoff.release()
        assert backoff.next() == 1.6  # the failed start was seen exiting too
        assert runner.restarts == 3
        spec.crash_file.unlink()
        backoff.release()
        third = _new_pid(spec.url, second)
        _wait_for(lambda: _backs(caplog) == 2)
        assert runner.process is not None and runner.process.pid == third
        assert backoff.unasked()  # no other restart was begun
    assert not _group_alive(third), "stopping the supervised runner left its group running"

    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in messages] == ["ERROR", "WARNING", "ERROR", "ERROR", "ERROR", "WARNING"], messages
    assert messages[0][1] == f"stand-in runner (pid {first.pid}) exited with -9; restarting it in 0.4s (restart 1)"
    assert messages[1][1].startswith(f"stand-in runner is back (pid {second}, healthy after")
    assert messages[2][1] == f"stand-in runner (pid {second}) exited with -9; restarting it in 0.8s (restart 2)"
    assert messages[3][1].startswith("stand-in runner did not come back: stand-in runner exited (3)")
    assert messages[4][1].endswith("exited with 3; restarting it in 1.6s (restart 3)")
    assert messages[5][1].startswith(f"stand-in runner is back (pid {third}, healthy after")
    log_text = (logs / "stand-in.log").read_text()
    assert log_text.count("--- ragserve: restarting the stand-in runner ---") == 3


def test_a_runner_that_stayed_up_stable_s_is_restarted_after_the_first_backoff_again(
    stand_in: tuple[StandInSpec, Path], caplog: pytest.LogCaptureFixture
) -> None:
    spec, logs = stand_in
    caplog.set_level(logging.WARNING, logger="ragserve.runners")
    clock = ManualClock()
    with running([spec], log_dir=logs, check=False) as (runner,), stepped(runner, clock) as backoff:
        pid = runner.process.pid if runner.process else 0
        steps = [(0.0, 0.4), (POLICY.stable_s - 0.5, 0.8), (POLICY.stable_s, 0.4)]
        for n, (up_for, expected) in enumerate(steps, start=1):
            clock.advance(up_for)  # how long the runner has been up when it is killed
            os.kill(pid, signal.SIGKILL)
            assert backoff.next() == expected, (up_for, expected)
            backoff.release()
            pid = _new_pid(spec.url, pid)
            _wait_for(lambda n=n: _backs(caplog) == n)
        assert runner.restarts == len(steps)


def test_without_supervision_a_dead_runner_stays_dead(stand_in: tuple[StandInSpec, Path]) -> None:
    spec, logs = stand_in
    with running([spec], log_dir=logs, check=False) as (runner,):
        process = runner.process
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait(LIVENESS_S) == -signal.SIGKILL
        # Nothing can bring it back: only a Supervisor restarts runners, from its watcher thread, and none runs.
        assert f"supervise-{spec.label}" not in {t.name for t in threading.enumerate()}
        assert _answering_pid(spec.url) is None and runner.restarts == 0 and runner.process is process
        runner.kill_group()


def test_supervised_runs_the_runners_restarts_one_that_exits_and_stops_both_on_exit(
    stand_in: tuple[StandInSpec, Path],
) -> None:
    """``supervised`` (what ``serve --with-runners``, ``runners up`` and the demo start runners with): the
    launcher's ``running`` with a supervisor around it, stopped before the runners are."""
    spec, logs = stand_in
    with supervised([spec], log_dir=logs, check=False, restart=replace(POLICY, initial_backoff_s=0.0)) as (runner,):
        first = runner.process
        assert first is not None and _answering_pid(spec.url) == first.pid
        os.kill(first.pid, signal.SIGKILL)
        second = _new_pid(spec.url, first.pid)
        assert runner.restarts == 1
    assert not _group_alive(second), "leaving supervised() left the restarted runner running"
    assert f"supervise-{spec.label}" not in {t.name for t in threading.enumerate()}
