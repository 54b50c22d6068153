"""Real vLLM runner processes for the test session, on free loopback ports, and the count of their starts."""

from __future__ import annotations

import itertools
import random
import socket
from dataclasses import dataclass
from pathlib import Path

GATE_VLLM_STARTS = 6
"""vLLM servers a gate session may start (a supervisor's restart after a test's kill not counted): the three
session runners, the VL runner, one spare MiniLM replica, and the runner the README's demo starts as part of what
it shows (tests/service/test_cli.py). Each start costs minutes on loaded cores, so a test that starts its own
runner instead of sharing these fails rather than quietly stretching CI."""
SOAK_VLLM_STARTS = 10
"""The soak tier starts the session runners, the spare, a third MiniLM replica, the session's VL runner and two VL
replicas of its own (8 in all)."""
_starts = {"count": 0, "cap": GATE_VLLM_STARTS}

TEST_CPU_PLAN = "vllm"
"""``RAGSERVE_RUNNERS__CPU_PLAN`` of the runners the tests start: vLLM's own placement, each runner's worker on core 0
and core 1 left to the suite (the test process, the API, the store child, the vLLM front ends). A gate session
keeps four to six runners up on 2 cores; the product's plan for them (``shared``: every worker on both cores)
would put four to six workers' threads on both cores beside the suite, and the suite's claims do not need their
speed. The README demo's runner, started by ``ragserve demo`` as a user's would be, keeps the product's default
(``auto``) and its test checks the runner bound every allowed core (tests/service/test_cli.py)."""

STORE_SPAWNS = 81
"""Store child processes (``ProcessStore.open``) a session's own process may spawn, either tier. The API tests run
the embedded store in the test's process (``IN_PROCESS_STORE`` in tests/conftest.py); the process boundary keeps
its own tests (the store contract over ProcessStore, the SIGKILL and SIGSTOP of the child, the full disk). Before
that split a session spawned about 300; the gate spawned 53 and the soak tier 5 (counted on 4 Dec 2026), and
issue 19 added 7 whose claims cross the boundary (a layout refused by the child, paged export through it, a
snapshot taken through it while it serves, one upsert of points with and without a sparse vector through it);
issue 20 added 3 store owners (``StoreOwner``: the first, a second refused the folder, the one started again
after the first's SIGKILL); issue 37 added 2 (a collection and its imported copy, tied hits through the child);
issue 38 added 5 (background builds: the child SIGKILLed mid-build and after a swap, writes racing the swap through
the child, the owner building for its peers and SIGKILLed mid-build).
Servers the tests start as processes (``ragserve serve``) are not counted: their children are theirs."""
_spawns = {"count": 0, "cap": STORE_SPAWNS}


def set_start_cap(cap: int) -> None:
    _starts["cap"] = cap


def scale_caps(times: int) -> None:
    """A session that repeats every test ``times`` times (pytest-repeat's ``--count``, as in the 20-in-a-row runs
    under load) may start and spawn that many times as much; a normal run has ``times`` 1."""
    _starts["cap"] *= times
    _spawns["cap"] *= times


def counted_store_spawn() -> None:
    """Count one store child about to be spawned; fail past ``STORE_SPAWNS``."""
    _spawns["count"] += 1
    assert _spawns["count"] <= _spawns["cap"], (
        f"{_spawns['count']} store processes spawned in this session, over the cap of {_spawns['cap']}: an API test "
        "whose claim is not about the store's process boundary runs the store in-process (IN_PROCESS_STORE)")


def counts() -> str:
    """The session's starts and spawns against their caps, for the end of the run."""
    return (f"vLLM starts {_starts['count']} of at most {_starts['cap']}; "
            f"store processes spawned {_spawns['count']} of at most {_spawns['cap']}")


def counted_start(n: int = 1) -> None:
    """Count ``n`` vLLM starts about to happen; fail past the session's cap."""
    _starts["count"] += n
    assert _starts["count"] <= _starts["cap"], (
        f"{_starts['count']} vLLM starts in this session, over the cap of {_starts['cap']}: share the session's "
        "runners (runners, vl_runner, spare_minilm) instead of starting new ones")


FIRST_PORT = 20000
"""The lowest port :func:`free_port` hands out; the highest is the one below the kernel's ephemeral range."""
_handed_out: set[int] = set()


def ephemeral_ports(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The kernel's ephemeral port range: where a bind to port 0 and every outgoing connection's source port
    are taken from (Linux's default where the file cannot be read)."""
    try:
        low, high = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port() -> int:
    """A loopback port that is free now and that the kernel will not hand to anyone meanwhile: one below the
    ephemeral range, never the same twice in a session.

    A port picked by binding port 0 is an ephemeral port, and the kernel may give it to any outgoing connection
    once the probe's socket is closed. A server that binds it a minute later (the README demo's API, after its
    vLLM runner has started and made its connections) then finds it taken: a CI run under stress-ng failed on
    exactly that ("address already in use"). Ports below the range are only ever taken by an explicit bind."""
    low, _ = ephemeral_ports()
    last = low - 1
    if last - FIRST_PORT < 1000:  # an unusual range, almost nothing below it: the kernel's own pick, as before
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    start = random.randrange(FIRST_PORT, last + 1)
    for port in itertools.chain(range(start, last + 1), range(FIRST_PORT, start)):
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port between {FIRST_PORT} and {last}")


@dataclass(frozen=True)
class RunnerURLs:
    qwen3_embed: str
    qwen3_rerank: str
    minilm_embed: str
    max_model_len: int


@dataclass(frozen=True)
class VLRunner:
    url: str
    lora_name: str
    lora_path: str
    max_model_len: int
