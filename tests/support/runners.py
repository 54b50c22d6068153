"""Real vLLM runner processes for the test session, on free loopback ports, and the count of their starts."""

from __future__ import annotations

import socket
from dataclasses import dataclass

GATE_VLLM_STARTS = 6
"""vLLM servers a gate session may start (a supervisor's restart after a test's kill not counted): the three
session runners, the VL runner, one spare MiniLM replica, and the runner the README's demo starts as part of what
it shows (tests/service/test_cli.py). Each start costs minutes on loaded cores, so a test that starts its own
runner instead of sharing these fails rather than quietly stretching CI."""
SOAK_VLLM_STARTS = 10
"""The soak tier starts the session runners, the spare, a third MiniLM replica and two VL replicas of its own."""
_starts = {"count": 0, "cap": GATE_VLLM_STARTS}


def set_start_cap(cap: int) -> None:
    _starts["cap"] = cap


def counted_start(n: int = 1) -> None:
    """Count ``n`` vLLM starts about to happen; fail past the session's cap."""
    _starts["count"] += n
    assert _starts["count"] <= _starts["cap"], (
        f"{_starts['count']} vLLM starts in this session, over the cap of {_starts['cap']}: share the session's "
        "runners (runners, vl_runner, spare_minilm) instead of starting new ones")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
