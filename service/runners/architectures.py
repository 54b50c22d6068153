"""The model shapes the parallelism planner counts with, from each checkpoint's ``config.json``.

Parameter counts are what the runner loads: the checkpoint's tensors (vision encoder included for the VL
models), checked against the model cards' sizes; where a card rounds ("8B"), the count was recomputed from
the config's shapes (embeddings, attention with q/k norms, gated MLP, norms; vision blocks and mergers).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Architecture:
    name: str
    params: float
    """Parameters the runner loads."""
    layers: int
    """Decoder layers, each with its own KV cache."""
    hidden: int
    heads: int
    """Attention heads: a tensor-parallel size must divide them (vLLM asserts it)."""
    kv_heads: int
    head_dim: int
    max_context: int
    """The model's own window (``max_position_embeddings``, or what its card states)."""
    dtype_bytes: int = 2
    """bf16."""
    expert_params: float = 0.0
    """Mixture of experts: parameters in the expert MLPs (what expert parallelism spreads out)."""
    experts: int = 0
    vision_heads: int = 0
    """Vision encoder heads (VL models): vLLM splits the encoder over TP too, so TP must divide them."""
    encoder_only: bool = False
    """Bidirectional encoders (BERT-like) keep no KV cache."""

    @property
    def moe(self) -> bool:
        return self.experts > 0


MODELS = {a.name: a for a in (
    # Qwen3-0.6B shape (config.json: 28 layers, hidden 1024, 16 heads, 8 KV heads of 128, tied embeddings).
    Architecture("Qwen/Qwen3-Embedding-0.6B", 595_776_512, 28, 1024, 16, 8, 128, 32_768),
    Architecture("Qwen/Qwen3-Reranker-0.6B", 595_776_512, 28, 1024, 16, 8, 128, 32_768),
    # text: 28 layers, hidden 2048, MLP 6144, 16 heads, 8 KV heads of 128, tied (1.72 B); vision: 24 blocks
    # of 1024 with 16 heads, 4 mergers (0.41 B). About 4.3 GB of bf16 weights.
    Architecture("Qwen/Qwen3-VL-2B-Instruct", 2.13e9, 28, 2048, 16, 8, 128, 262_144, vision_heads=16),
    # Qwen3-8B shape (36 layers, hidden 4096, MLP 12288, 32 heads, 8 KV heads of 128, untied 151,936 vocab);
    # the embedding checkpoint has no LM head (7.57 B), the reranker keeps it (8.19 B).
    Architecture("Qwen/Qwen3-Embedding-8B", 7_568_405_504, 36, 4096, 32, 8, 128, 32_768),
    Architecture("Qwen/Qwen3-Reranker-8B", 8_190_735_360, 36, 4096, 32, 8, 128, 32_768),
    # text: Qwen3-32B shape (64 layers, hidden 5120, MLP 25600, 64 heads, 8 KV heads of 128, untied: 32.76 B);
    # vision: 27 blocks of 1152 with 16 heads, out 5120, 4 mergers (0.60 B). 62 GiB of bf16 weights.
    Architecture("Qwen/Qwen3-VL-32B-Instruct", 33.36e9, 64, 5120, 64, 8, 128, 262_144, vision_heads=16),
    # The Hugging Face Inference Endpoints examples (32 layers, hidden 4096, 32 heads, 8 KV heads of 128).
    Architecture("meta-llama/Meta-Llama-3-8B-Instruct", 8.03e9, 32, 4096, 32, 8, 128, 8192),
    Architecture("meta-llama/Meta-Llama-3-70B-Instruct", 70.55e9, 80, 8192, 64, 8, 128, 8192),
    # MoE: 48 layers, hidden 2048, 32 heads, 4 KV heads of 128; 128 experts (8 active) of MLP 768 in every
    # layer: 48 x 128 x 3 x 2048 x 768 = 28.99 B of the 30.53 B parameters are experts.
    Architecture("Qwen/Qwen3-30B-A3B", 30.53e9, 48, 2048, 32, 4, 128, 40_960, expert_params=28.99e9, experts=128),
    # BERT-like encoder: 6 layers, hidden 384, 12 heads of 32; no KV cache.
    Architecture("sentence-transformers/all-MiniLM-L6-v2", 22_713_216, 6, 384, 12, 12, 32, 256, encoder_only=True),
)}


def architecture(name: str) -> Architecture:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"no architecture for {name!r} in service/runners/architectures.py; known: "
                       f"{', '.join(sorted(MODELS))}") from None
