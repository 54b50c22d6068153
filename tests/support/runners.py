"""Real vLLM runner processes for the test session, on free loopback ports."""

from __future__ import annotations

import socket
from dataclasses import dataclass


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
