"""Parallelism for one runner: which tensor / pipeline / data / expert parallel layouts fit, and what each holds.

The arithmetic is vLLM's own start-up accounting, per GPU of one model copy:

    budget       = gpu_memory x --gpu-memory-utilization
    weights      = params x dtype bytes / (TP x PP)        (MoE with EP: expert weights / (TP x PP x DP))
    KV memory    = budget - weights - overhead              (overhead: activation peak, CUDA graphs, NCCL and
                                                             other non-torch memory; vLLM measures it, we
                                                             reserve a margin)
    KV per token = 2 (K and V) x ceil(layers / PP) x max(1, kv_heads // TP) x head_dim x KV dtype bytes
    KV tokens    = floor(KV memory / (16 x KV per token)) x 16         vLLM's "GPU KV cache size: N tokens"
    concurrency  = KV tokens / max_model_len                 vLLM's "Maximum concurrency for L tokens: Cx"

A copy starts only if its KV cache holds one sequence of max_model_len tokens (vLLM refuses otherwise).
The choice follows the field guides (vLLM's distributed-serving guide, Hugging Face Inference Endpoints):
split a model only as far as it must be split to fit (tensor parallel within a node over NVLink; pipeline
parallel across nodes, or between GPUs without NVLink), then spend every other GPU on copies (data
parallel: throughput, no traffic between copies); for a mixture of experts, spread the experts over the
TP x DP GPUs (expert parallel) instead of copying them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from service.runners.architectures import Architecture

GiB = 1024**3
BLOCK_TOKENS = 16
"""vLLM's KV cache block size on GPUs: capacity is counted in whole blocks."""
DEFAULT_OVERHEAD_GIB = 1.5
"""Per-GPU margin for what is neither weights nor KV cache. Calibrated on the field report in
deploy/generation.md (Qwen3-VL-2B, 8 GB GPU at 0.92: 19,904 KV tokens, so about 1.2 GiB besides its weights)
and deploy/gpu-host/README.md (about 1.5 GB for the pooling runners); vLLM logs the real figure at start-up."""
DEDICATED_SHARE = 0.90
"""The share of a GPU a runner takes when the GPU is its own."""


@dataclass(frozen=True)
class Gpus:
    """The GPUs a runner is spread over: ``count`` in all, on ``nodes`` nodes."""

    count: int
    memory_gib: float
    nodes: int = 1
    nvlink: bool = True

    def __post_init__(self) -> None:
        if self.count < 1 or self.nodes < 1 or self.count % self.nodes:
            raise ValueError(f"{self.count} GPUs do not spread evenly over {self.nodes} node(s)")

    @property
    def per_node(self) -> int:
        return self.count // self.nodes


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: bool = False

    @property
    def split(self) -> int:
        """GPUs one copy of the model spans."""
        return self.tp * self.pp

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def label(self) -> str:
        parts = [f"TP{self.tp}"] + ([f"PP{self.pp}"] if self.pp > 1 else []) + [f"DP{self.dp}"]
        return " x ".join(parts) + (" + EP" if self.ep else "")

    def flags(self, utilization: float) -> list[str]:
        """The runner flags for this layout (data parallel as one server; replicas are the alternative)."""
        out = ["--tensor-parallel-size", str(self.tp)]
        if self.pp > 1:
            out += ["--pipeline-parallel-size", str(self.pp)]
        if self.dp > 1:
            out += ["--data-parallel-size", str(self.dp)]
        if self.ep:
            out.append("--enable-expert-parallel")
        return [*out, "--gpu-memory-utilization", f"{utilization:g}"]


@dataclass(frozen=True)
class Memory:
    """One GPU of one copy, in bytes; tokens and concurrency are the copy's."""

    budget: float
    weights: float
    overhead: float
    kv: float
    kv_per_token: int
    tokens: int
    concurrency: float


@dataclass(frozen=True)
class Option:
    layout: Layout
    memory: Memory
    refusals: list[str] = field(default_factory=list)
    """Why this layout cannot run (empty: it can)."""

    @property
    def fits(self) -> bool:
        return not self.refusals


def kv_bytes_per_token(arch: Architecture, layout: Layout, kv_dtype_bytes: int) -> int:
    """One token's K and V on one GPU: its layers (PP) and its share of the KV heads (TP; heads are
    replicated when TP exceeds them, as vLLM does)."""
    if arch.encoder_only:
        return 0
    layers = math.ceil(arch.layers / layout.pp)
    return 2 * layers * max(1, arch.kv_heads // layout.tp) * arch.head_dim * kv_dtype_bytes


def weights_per_gpu(arch: Architecture, layout: Layout) -> float:
    total = arch.params * arch.dtype_bytes
    if not layout.ep:
        return total / layout.split
    experts = arch.expert_params * arch.dtype_bytes
    return (total - experts) / layout.split + experts / (layout.split * layout.dp)


def memory(arch: Architecture, layout: Layout, gpus: Gpus, *, utilization: float, max_model_len: int,
           kv_dtype_bytes: int, overhead_gib: float = DEFAULT_OVERHEAD_GIB) -> Memory:
    budget = gpus.memory_gib * GiB * utilization
    weights = weights_per_gpu(arch, layout)
    overhead = overhead_gib * GiB
    kv = budget - weights - overhead
    per_token = kv_bytes_per_token(arch, layout, kv_dtype_bytes)
    if per_token == 0:
        return Memory(budget, weights, overhead, kv, 0, 0, 0.0)
    tokens = max(0, int(kv // (BLOCK_TOKENS * per_token)) * BLOCK_TOKENS)
    return Memory(budget, weights, overhead, kv, per_token, tokens, tokens / max_model_len)


def refusals(arch: Architecture, layout: Layout, gpus: Gpus, mem: Memory, max_model_len: int) -> list[str]:
    out = []
    if layout.tp > gpus.per_node:
        out.append(f"TP {layout.tp} spans nodes of {gpus.per_node} GPUs: tensor parallel stays within a node")
    if arch.heads % layout.tp or (arch.vision_heads and arch.vision_heads % layout.tp):
        heads = f"{arch.heads} heads" + (f" ({arch.vision_heads} in the vision encoder)" if arch.vision_heads else "")
        out.append(f"{heads} do not split over TP {layout.tp}")
    if layout.pp > arch.layers:
        out.append(f"{arch.layers} layers cannot fill {layout.pp} pipeline stages")
    if layout.ep and not arch.moe:
        out.append("expert parallel needs a mixture-of-experts model")
    if mem.kv <= 0:
        out.append(f"weights and margin ({(mem.weights + mem.overhead) / GiB:.2f} GiB) exceed the "
                   f"{mem.budget / GiB:.2f} GiB it may take of each GPU")
    elif not arch.encoder_only and mem.tokens < max_model_len:
        out.append(f"its KV cache holds {mem.tokens:,} tokens, less than one {max_model_len:,}-token sequence")
    return out


def layouts(arch: Architecture, gpus: Gpus) -> list[Layout]:
    """Every TP x PP x DP that uses all the GPUs, tensor parallel within a node; pipeline stages only where
    they are the field guides' answer (several nodes, or no NVLink); expert parallel for MoE models."""
    out = []
    for tp in _divisors(gpus.count):
        for pp in _divisors(gpus.count // tp):
            if pp > 1 and gpus.nodes == 1 and gpus.nvlink:
                continue
            dp = gpus.count // (tp * pp)
            out.append(Layout(tp, pp, dp, ep=arch.moe and tp * dp > 1))
    return sorted(out, key=lambda lay: (-lay.tp, -lay.pp, lay.dp))


def options(arch: Architecture, gpus: Gpus, *, utilization: float, max_model_len: int, kv_dtype_bytes: int,
            overhead_gib: float = DEFAULT_OVERHEAD_GIB) -> list[Option]:
    found = []
    for layout in layouts(arch, gpus):
        mem = memory(arch, layout, gpus, utilization=utilization, max_model_len=max_model_len,
                     kv_dtype_bytes=kv_dtype_bytes, overhead_gib=overhead_gib)
        found.append(Option(layout, mem, refusals(arch, layout, gpus, mem, max_model_len)))
    return found


def recommend(found: list[Option], gpus: Gpus) -> Option | None:
    """The smallest split that fits, then data parallel over the rest. For a split, tensor parallel when the
    GPUs have NVLink and the copy stays within a node; without NVLink, pipeline stages; across nodes, TP
    within each node and PP across them."""
    fitting = [o for o in found if o.fits]
    if not fitting:
        return None
    smallest = min(o.layout.split for o in fitting)
    candidates = [o for o in fitting if o.layout.split == smallest]

    def preference(o: Option) -> tuple[int, int]:
        tp_first = o.layout.tp if gpus.nvlink else -o.layout.tp
        return (-tp_first, o.layout.pp)

    return min(candidates, key=preference)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
