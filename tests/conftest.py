"""Session fixtures: tiny Qwen3 checkpoints built at test time, and three real vLLM runners
(tiny Qwen3 embedding, tiny Qwen3 reranker, all-MiniLM-L6-v2) started once, together, per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.config import Settings
from service.profiles import MINILM, QWEN3
from service.runners.launcher import runner_specs, running
from tests.support.app import API_KEY
from tests.support.runners import RunnerURLs, free_port
from tests.support.tiny_qwen3 import build_tiny_qwen3

MAX_MODEL_LEN = 2048


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture(scope="session")
def runner_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runner-logs")


@pytest.fixture(scope="session")
def runners(tiny_qwen3: Path, runner_logs: Path) -> Iterator[RunnerURLs]:
    reuse = os.environ.get("RAGSERVE_TEST_RUNNER_URLS")
    if reuse:  # developer shortcut: "EMBED,RERANK,MINILM" of runners already up (never set in CI)
        embed, rerank, minilm_url = reuse.split(",")
        yield RunnerURLs(embed, rerank, minilm_url, MAX_MODEL_LEN)
        return
    ports = [free_port() for _ in range(3)]
    qwen = Settings(
        profile="qwen3",
        runners={
            "embed_url": f"http://127.0.0.1:{ports[0]}",
            "rerank_url": f"http://127.0.0.1:{ports[1]}",
            "embed_model_path": str(tiny_qwen3),
            "rerank_model_path": str(tiny_qwen3),
            "max_model_len": MAX_MODEL_LEN,
        },
    )
    minilm = Settings(profile="minilm", runners={"embed_url": f"http://127.0.0.1:{ports[2]}"})
    specs = runner_specs(qwen, QWEN3) + runner_specs(minilm, MINILM)
    specs[2].name = "minilm-embedding"
    with running(specs, log_dir=runner_logs, timeout_s=600):
        yield RunnerURLs(
            qwen3_embed=specs[0].url, qwen3_rerank=specs[1].url, minilm_embed=specs[2].url,
            max_model_len=MAX_MODEL_LEN,
        )


@pytest.fixture
def qwen3_settings(runners: RunnerURLs, tmp_path: Path) -> Settings:
    return Settings(
        profile="qwen3",
        data_dir=tmp_path,
        api_keys=[API_KEY],
        runners={"embed_url": runners.qwen3_embed, "rerank_url": runners.qwen3_rerank,
                 "max_model_len": runners.max_model_len},
    )


@pytest.fixture
def minilm_settings(runners: RunnerURLs, tmp_path: Path) -> Settings:
    return Settings(profile="minilm", data_dir=tmp_path, api_keys=[API_KEY],
                    runners={"embed_url": runners.minilm_embed})
