"""The supervisor on real processes that cost nothing: a stand-in runner (a Python HTTP server answering
``/health``, which also forks a child the way vLLM's server forks its engine core), started with the
launcher's own process handling. SIGKILL it and the supervisor kills what is left of its group, restarts
it with doubling backoff, logs each step, and the new process answers. (A real vLLM runner killed mid-burst
and mid-job: tests/faults/test_runner_crash.py.)"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.runners.launcher import RunnerSpec, _group_alive, running
from service.runners.supervisor import RestartPolicy
from tests.support.runners import free_port

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


def _wait_for(predicate, timeout_s: float):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout_s}s")


def test_a_killed_runner_is_restarted_with_backoff_and_logged(
    stand_in: tuple[StandInSpec, Path], caplog: pytest.LogCaptureFixture
) -> None:
    spec, logs = stand_in
    policy = RestartPolicy(initial_backoff_s=0.4, max_backoff_s=5, stable_s=60, startup_timeout_s=10, poll_s=0.05)
    caplog.set_level(logging.WARNING, logger="ragserve.runners")
    with running([spec], log_dir=logs, check=False, supervise=True, restart=policy) as (runner,):
        first = runner.process
        assert first is not None and _answering_pid(spec.url) == first.pid
        os.kill(first.pid, signal.SIGKILL)  # the server only: its forked child stays, as vLLM's engine core would
        killed_at = time.monotonic()
        second = _wait_for(lambda: (p := _answering_pid(spec.url)) and p != first.pid and p, 10)
        first_gap = time.monotonic() - killed_at
        _wait_for(lambda: any("is back" in r.getMessage() for r in caplog.records), 5)
        assert not _group_alive(first.pid), "the dead runner's child was left running"

        spec.crash_file.touch()  # the next start fails: one more backoff, twice as long, then it comes back
        os.kill(second, signal.SIGKILL)
        killed_at = time.monotonic()
        _wait_for(lambda: runner.restarts == 3, 10)  # 2: the failed start was seen exiting too
        spec.crash_file.unlink()
        third = _wait_for(lambda: (p := _answering_pid(spec.url)) and p != second and p, 10)
        second_gap = time.monotonic() - killed_at
        _wait_for(lambda: sum("is back" in r.getMessage() for r in caplog.records) == 2, 5)
        assert runner.process is not None and runner.process.pid == third
    assert not _group_alive(third), "stopping the supervised runner left its group running"

    assert 0.4 <= first_gap < 3.0
    assert second_gap >= 0.8 + 1.6  # the failed start after 0.8 s, the good one 1.6 s after that
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


def test_without_supervision_a_dead_runner_stays_dead(stand_in: tuple[StandInSpec, Path]) -> None:
    spec, logs = stand_in
    with running([spec], log_dir=logs, check=False) as (runner,):
        assert runner.process is not None
        os.kill(runner.process.pid, signal.SIGKILL)
        time.sleep(1.0)
        assert _answering_pid(spec.url) is None and runner.restarts == 0
        runner.kill_group()
