"""vLLM engine arguments per runner: the settings hosted vLLM endpoints expose, and the parallel layout.

``RAGSERVE_ENGINE__<RUNNER>__<ARG>`` with RUNNER one of EMBED, RERANK, GENERATE::

    RAGSERVE_ENGINE__GENERATE__TENSOR_PARALLEL_SIZE=4
    RAGSERVE_ENGINE__EMBED__MAX_NUM_SEQS=128
    RAGSERVE_ENGINE__GENERATE__KV_CACHE_DTYPE=fp8
    RAGSERVE_ENGINE__RERANK__EXTRA_ARGS='--enable-prefix-caching --max-num-partial-prefills 2'

The launcher appends :meth:`EngineArgs.flags` to each runner's command line (``ragserve runners up
--print-only`` shows them), ``ragserve runners plan`` counts them, and ``extra_args`` is checked against the
installed vLLM's own argument parser before a runner starts (``service/runners/vllm_args.py``).
"""

from __future__ import annotations

import json
import shlex
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import NoDecode

KvCacheDtype = Literal["auto", "fp8", "fp8_e5m2", "fp8_e4m3"]

KV_CACHE_BYTES = {"fp8": 1, "fp8_e5m2": 1, "fp8_e4m3": 1}
"""Bytes per KV element of the fp8 cache types; ``auto`` is the model's dtype (bf16: 2 bytes)."""

OWN_FLAGS = frozenset({
    "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--enable-expert-parallel",
    "--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-dtype",
})
"""The flags :class:`EngineArgs` has a field for: ``extra_args`` may not repeat them."""


class EngineArgs(BaseModel):
    """One runner's vLLM engine arguments. Unset ones are left to vLLM's defaults."""

    model_config = ConfigDict(extra="forbid")

    tensor_parallel_size: int = Field(
        1, ge=1, description="--tensor-parallel-size: GPUs of one node that every layer is split across (NVLink).")
    pipeline_parallel_size: int = Field(
        1, ge=1, description="--pipeline-parallel-size: stages of consecutive layers (across nodes, or no NVLink).")
    data_parallel_size: int = Field(
        1, ge=1, description="--data-parallel-size: copies of the model behind one API server (throughput).")
    enable_expert_parallel: bool = Field(
        False, description="--enable-expert-parallel: a MoE model's experts spread over the TP x DP GPUs.")
    max_num_seqs: int | None = Field(None, ge=1, description="--max-num-seqs: sequences in one batch.")
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="--max-num-batched-tokens: tokens in one engine step (prefill chunk size).")
    kv_cache_dtype: KvCacheDtype = Field(
        "auto", description="--kv-cache-dtype: auto (the model's dtype) or fp8 (twice the tokens, slightly lossy).")
    extra_args: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Any other vLLM engine arguments: a JSON list or a shell-quoted string. "
        "Checked against the installed vLLM's parser before the runner starts.")
    gpus: Annotated[list[int] | None, NoDecode] = Field(
        None, description="CUDA devices of this host the runner uses (CUDA_VISIBLE_DEVICES), comma-separated: "
        "as many as TP x PP x DP. Unset: the first ones, shared with the other runners.")

    @field_validator("extra_args", mode="before")
    @classmethod
    def _split_args(cls, value: object) -> object:
        if isinstance(value, str):
            return json.loads(value) if value.lstrip().startswith("[") else shlex.split(value)
        return value

    @field_validator("extra_args")
    @classmethod
    def _not_our_own(cls, args: list[str]) -> list[str]:
        for arg in args:
            if option_name(arg) in OWN_FLAGS:
                field = option_name(arg).removeprefix("--").replace("-", "_")
                raise ValueError(f"{arg.split('=', 1)[0]} has its own setting: set {field.upper()} instead")
        return args

    @field_validator("gpus", mode="before")
    @classmethod
    def _split_gpus(cls, value: object) -> object:
        if isinstance(value, str):
            return json.loads(value) if value.lstrip().startswith("[") else [v for v in value.split(",") if v.strip()]
        if isinstance(value, int):
            return [value]
        return value

    @model_validator(mode="after")
    def _gpus_cover_the_layout(self) -> EngineArgs:
        if self.gpus is not None and len(self.gpus) != self.world_size:
            raise ValueError(f"gpus names {len(self.gpus)} devices but TP x PP x DP = {self.world_size}")
        return self

    @property
    def world_size(self) -> int:
        """GPUs one runner uses: tensor x pipeline x data parallel."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    def devices(self) -> list[int]:
        """The devices the runner lands on: its ``gpus``, else the first ``world_size`` (vLLM's choice)."""
        return list(self.gpus) if self.gpus is not None else list(range(self.world_size))

    def flags(self, *, gpu: bool) -> list[str]:
        """The vLLM flags for these arguments. On a GPU host the tensor-parallel size is always spelled out
        (as the manifests do); elsewhere only what differs from vLLM's defaults."""
        out: list[str] = []
        if gpu or self.tensor_parallel_size > 1:
            out += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.pipeline_parallel_size > 1:
            out += ["--pipeline-parallel-size", str(self.pipeline_parallel_size)]
        if self.data_parallel_size > 1:
            out += ["--data-parallel-size", str(self.data_parallel_size)]
        if self.enable_expert_parallel:
            out.append("--enable-expert-parallel")
        if self.max_num_seqs is not None:
            out += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.max_num_batched_tokens is not None:
            out += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if self.kv_cache_dtype != "auto":
            out += ["--kv-cache-dtype", self.kv_cache_dtype]
        return [*out, *self.extra_args]

    def kv_bytes(self, model_dtype_bytes: int) -> int:
        """Bytes per cached K or V element."""
        return KV_CACHE_BYTES.get(self.kv_cache_dtype, model_dtype_bytes)


class EngineSettings(BaseModel):
    """Per-runner vLLM engine arguments (``RAGSERVE_ENGINE__EMBED__…``, ``__RERANK__…``, ``__GENERATE__…``)."""

    embed: EngineArgs = Field(default_factory=EngineArgs, description="The embedding runner's.")
    rerank: EngineArgs = Field(default_factory=EngineArgs, description="The reranker runner's.")
    generate: EngineArgs = Field(default_factory=EngineArgs, description="The generation runner's.")


def option_name(arg: str) -> str | None:
    """``--max_num_seqs=8`` -> ``--max-num-seqs``, as vLLM's parser reads it (underscores become dashes
    before the first ``.``; ``--hf-overrides.key`` names ``--hf-overrides``). None for anything else."""
    if not arg.startswith("--") or arg == "--":
        return None
    name = arg.split("=", 1)[0].split(".", 1)[0]
    return name.replace("_", "-").removesuffix("+")
