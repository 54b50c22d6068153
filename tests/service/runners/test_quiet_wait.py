"""The CPU runners' start-up hook (service/runners/quiet_wait/sitecustomize.py): vLLM's shared-memory queue readers
wait on their socket instead of spinning, in every process of a real runner."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace

import psutil
import pytest

from service.runners.launcher import QUIET_WAIT
from tests.support.runners import RunnerURLs

READ_QUEUE = """
import json, zmq
from vllm.distributed.device_communicators import shm_broadcast as m
context = zmq.Context()
reader = m.SpinCondition(is_reader=True, context=context, notify_address="inproc://quiet-wait-test")
writer = m.SpinCondition(is_reader=False, context=context, notify_address="inproc://quiet-wait-test-2")
print(json.dumps([reader.busy_loop_s, writer.busy_loop_s, m.SHM_READER_RECHECK_INTERVAL_MS]))
"""


def _python(code: str, *path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path:
        env["PYTHONPATH"] = os.pathsep.join(map(str, path))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                          check=True)


def test_a_queue_reader_waits_on_its_socket() -> None:
    """Without the hook, vLLM's reader spins for 1 s and rechecks a lost notification after 5 s: both change."""
    plain = _python(READ_QUEUE)
    assert json.loads(plain.stdout.splitlines()[-1]) == [1, 0, 5000]
    hooked = _python(READ_QUEUE + "import os; print(os.getpid())", QUIET_WAIT)
    *_, figures, pid = hooked.stdout.splitlines()
    assert json.loads(figures) == [0, 0, 5]
    assert f"ragserve quiet_wait (pid {pid}): queue readers wait on their socket\n" in hooked.stderr


def test_the_sitecustomize_it_shadows_still_runs(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import sys; sys.stderr.write('the next one ran\\n')\n")
    assert _python("pass", QUIET_WAIT, tmp_path).stderr == "the next one ran\n"


@pytest.fixture
def hook() -> Iterator[ModuleType]:
    """The hook as a module of this process, its import finder taken off again."""
    spec = importlib.util.spec_from_file_location("quiet_wait_under_test", QUIET_WAIT / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    finders = list(sys.meta_path)
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        sys.meta_path[:] = finders


def test_a_changed_queue_is_left_as_it_is(hook: ModuleType) -> None:
    class SpinCondition:
        def __init__(self) -> None:
            self.is_reader, self.busy_loop_s = True, 1

    renamed = SimpleNamespace(SpinCondition=SpinCondition, SHM_READER_RECHECK_INTERVAL_S=5.0)
    assert hook.quiet(renamed) is False
    assert SpinCondition().busy_loop_s == 1 and vars(renamed) == {"SpinCondition": SpinCondition,
                                                                "SHM_READER_RECHECK_INTERVAL_S": 5.0}
    assert hook.quiet(SimpleNamespace(SHM_READER_RECHECK_INTERVAL_MS=5000)) is False


def _tree(port: int) -> dict[str, int]:
    """The runner listening on ``port``: its processes by what they are (vLLM names its children)."""
    (server,) = {c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
                 and c.status == psutil.CONN_LISTEN}
    found = {"server": server}
    for child in psutil.Process(server).children(recursive=True):
        name = " ".join(child.cmdline())
        for kind in ("EngineCore", "Worker"):
            if f"VLLM::{kind}" in name:
                found[kind] = child.pid
    return found


def test_every_process_of_a_cpu_runner_has_it(runners: RunnerURLs, runner_logs: Path) -> None:
    """The session's MiniLM runner, started by the launcher: its API server, engine core and worker each ran
    the hook, and none found vLLM's queue changed."""
    log = (runner_logs / "minilm-embedding.log").read_text(errors="replace")
    said = {int(pid): what for pid, what in re.findall(r"ragserve quiet_wait \(pid (\d+)\): (.*)", log)}
    processes = _tree(int(runners.minilm_embed.rsplit(":", 1)[1]))
    assert sorted(processes) == ["EngineCore", "Worker", "server"], processes
    assert said == {pid: "queue readers wait on their socket" for pid in processes.values()}
