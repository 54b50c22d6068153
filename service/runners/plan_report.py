"""``ragserve runners plan``: the planner's options for each runner of a profile (or named models), as text.

Each runner is planned over the GPUs given, at the share of each GPU it takes: by default the share its
setting gives it (``RAGSERVE_RUNNERS__GPU_MEMORY_UTILIZATION`` for the pooling runners,
``RAGSERVE_GENERATION__GPU_MEMORY_UTILIZATION`` for the generator: the launcher starts them sharing the
GPUs), or ``--gpu-memory-utilization`` for GPUs of their own. Context length and KV cache dtype are the
launcher's for that runner (``RAGSERVE_RUNNERS__MAX_MODEL_LEN``, ``RAGSERVE_GENERATION__MAX_MODEL_LEN``,
``RAGSERVE_ENGINE__*__KV_CACHE_DTYPE``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from service.config import Settings
from service.config.engine import EngineArgs
from service.profiles import get_profile, resolve_generator
from service.runners.architectures import Architecture, architecture
from service.runners.planner import (
    DEDICATED_SHARE,
    DEFAULT_OVERHEAD_GIB,
    GiB,
    Gpus,
    Option,
    options,
    recommend,
)


@dataclass(frozen=True)
class Runner:
    """What the planner needs to know about one runner."""

    name: str
    arch: Architecture
    max_model_len: int
    utilization: float
    share_setting: str
    engine: EngineArgs
    engine_key: str = ""


def profile_runners(settings: Settings) -> list[Runner]:
    """The profile's runners with the context length, share and engine arguments the launcher gives them."""
    profile = get_profile(settings.profile)
    rs, gs, eng = settings.runners, settings.generation, settings.engine
    pool_share = "RAGSERVE_RUNNERS__GPU_MEMORY_UTILIZATION"
    out = [Runner("embedding", architecture(profile.embedding.name),
                  min(profile.embedding.max_tokens, rs.max_model_len or profile.embedding.max_tokens),
                  rs.gpu_memory_utilization, pool_share, eng.embed, "embed")]
    if profile.reranker is not None:
        out.append(Runner("rerank", architecture(profile.reranker.name),
                          min(profile.reranker.max_tokens, rs.max_model_len or profile.reranker.max_tokens),
                          rs.gpu_memory_utilization, pool_share, eng.rerank, "rerank"))
    generator = resolve_generator(profile, enabled=gs.enabled, model=gs.model)
    if generator is not None:
        out.append(Runner("generate", architecture(generator.name), min(generator.max_tokens, gs.max_model_len),
                          gs.gpu_memory_utilization, "RAGSERVE_GENERATION__GPU_MEMORY_UTILIZATION", eng.generate,
                          "generate"))
    return out


def model_runner(name: str, *, max_model_len: int | None, kv_cache_dtype: str) -> Runner:
    arch = architecture(name)
    return Runner("model", arch, max_model_len or arch.max_context, DEDICATED_SHARE, "--gpu-memory-utilization",
                  EngineArgs(kv_cache_dtype=kv_cache_dtype))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Plan:
    options: list[Option]
    """Every layout over the GPUs, at the runner's share."""
    choice: Option | None
    """The layout to run: the smallest split that fits, then data parallel."""
    share: float
    """The share of each GPU the choice takes."""
    own_gpu: bool = False
    """True when the choice needs a GPU of the runner's own: at its share the model would have to be split
    although one GPU (at 0.90) holds it. A model that fits one GPU is never split; it gets more of the GPU."""


def plan_runner(runner: Runner, gpus: Gpus, *, overhead_gib: float = DEFAULT_OVERHEAD_GIB,
                utilization: float | None = None) -> Plan:
    share = utilization if utilization is not None else runner.utilization
    kv_bytes = runner.engine.kv_bytes(runner.arch.dtype_bytes)
    found = options(runner.arch, gpus, utilization=share, max_model_len=runner.max_model_len,
                    kv_dtype_bytes=kv_bytes, overhead_gib=overhead_gib)
    best = recommend(found, gpus)
    if (best is None or best.layout.split > 1) and share < DEDICATED_SHARE:
        own = recommend(options(runner.arch, gpus, utilization=DEDICATED_SHARE, max_model_len=runner.max_model_len,
                                kv_dtype_bytes=kv_bytes, overhead_gib=overhead_gib), gpus)
        if own is not None and own.layout.split == 1:
            return Plan(found, own, DEDICATED_SHARE, own_gpu=True)
    return Plan(found, best, share)


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def render(runners: list[Runner], gpus: Gpus, *, overhead_gib: float = DEFAULT_OVERHEAD_GIB,
           utilization: float | None = None, title: str = "") -> str:
    return "\n".join(_render(runners, gpus, overhead_gib, utilization, title))


def _render(runners: list[Runner], gpus: Gpus, overhead_gib: float, utilization: float | None,
            title: str) -> Iterator[str]:
    link = "NVLink" if gpus.nvlink else "no NVLink (PCIe)"
    yield (f"{title}{gpus.count} GPU(s) x {gpus.memory_gib:g} GiB on {gpus.nodes} node(s), {link}; margin "
           f"{overhead_gib:g} GiB per GPU for activations, CUDA graphs and non-torch memory")
    if utilization is None and len(runners) > 1:
        shares = " + ".join(f"{r.name} {r.utilization:g}" for r in runners)
        total = sum(r.utilization for r in runners)
        yield (f"the runners share these GPUs at their settings' shares: {shares} = {total:.2f} of each GPU "
               "(pass --gpu-memory-utilization 0.9 to plan GPUs of their own)")
    for runner in runners:
        yield ""
        yield from _runner_lines(runner, gpus, overhead_gib, utilization)


def _runner_lines(runner: Runner, gpus: Gpus, overhead_gib: float, utilization: float | None) -> Iterator[str]:
    arch, share = runner.arch, utilization if utilization is not None else runner.utilization
    plan = plan_runner(runner, gpus, overhead_gib=overhead_gib, utilization=utilization)
    best = plan.choice
    kv_b = runner.engine.kv_bytes(arch.dtype_bytes)
    dtype = runner.engine.kv_cache_dtype
    source = "--gpu-memory-utilization" if utilization is not None else runner.share_setting
    yield f"{runner.name}: {arch.name}"
    yield (f"  weights     {arch.params / 1e9:.2f} B params x {arch.dtype_bytes} B = "
           f"{_gib(arch.params * arch.dtype_bytes)}" + (f" ({arch.expert_params / 1e9:.2f} B in {arch.experts} "
                                                        "experts)" if arch.moe else ""))
    if arch.encoder_only:
        yield "  KV cache    none (an encoder: every request is one forward pass)"
    else:
        per_token = 2 * arch.layers * arch.kv_heads * arch.head_dim * kv_b
        yield (f"  KV/token    2 x {arch.layers} layers x {arch.kv_heads} KV heads x {arch.head_dim} x {kv_b} B "
               f"(kv-cache-dtype {dtype}) = {per_token / 1024:g} KiB, / TP (heads), / PP (layers)")
    yield (f"  per GPU     {gpus.memory_gib:g} GiB x {share:g} ({source}) = {_gib(gpus.memory_gib * GiB * share)}; "
           f"max length {runner.max_model_len:,} tokens")
    yield f"  {'layout':<18}{'weights/GPU':>12}{'KV/GPU':>12}{'KV tokens/copy':>16}{'conc./copy':>12}{'copies':>8}"
    for o in plan.options:
        yield _row("=>" if o is best else "  ", o, arch)
    if best is None:
        yield "  nothing fits: more or larger GPUs, a larger share, a shorter max length, or an fp8 KV cache"
        return
    if plan.own_gpu:
        yield (f"  at {plan.share:g} of each GPU (a GPU of its own), one GPU holds it: a model that fits one GPU "
               "gets more of it, never a split")
        yield _row("=>", best, arch)
    yield f"  choose      {best.layout.label}: {_why(runner, best, gpus)}"
    yield f"  flags       {' '.join(best.layout.flags(plan.share))}"
    yield "  settings    " + " ".join(_settings(runner, best))


def _row(mark: str, o: Option, arch: Architecture) -> str:
    m = o.memory
    if not o.fits:
        return f"{mark}{o.layout.label:<18}{_gib(m.weights):>12}   does not run: {'; '.join(o.refusals)}"
    conc = "-" if arch.encoder_only else f"{m.concurrency:.2f}x"
    tokens = "-" if arch.encoder_only else f"{m.tokens:,}"
    return (f"{mark}{o.layout.label:<18}{_gib(m.weights):>12}{_gib(m.kv):>12}{tokens:>16}{conc:>12}"
            f"{o.layout.dp:>8}   {_tradeoff(o)}")


def _tradeoff(o: Option) -> str:
    lay = o.layout
    if lay.pp > 1 and lay.dp == 1:
        return "pipeline stages: fits, each token passes every stage in turn"
    if lay.tp > 1 and lay.dp == 1:
        return "lowest latency, most KV per copy; one copy: least throughput"
    if lay.split > 1 and lay.dp > 1:
        return "balanced: fewer, larger copies"
    if lay.dp > 1:
        return "most throughput: independent copies, no traffic between GPUs; least KV per copy"
    return "one copy on one GPU"


def _why(runner: Runner, best: Option, gpus: Gpus) -> str:
    lay, arch = best.layout, runner.arch
    if lay.split == 1:
        needs = best.memory.weights + best.memory.overhead + best.memory.kv_per_token * runner.max_model_len
        why = (f"one GPU holds the model: {_gib(needs)} (weights, margin, one {runner.max_model_len:,}-token "
               f"sequence) of the {_gib(best.memory.budget)} it may take. ")
        if lay.dp > 1:
            why += ("The other GPUs are copies (data parallel): throughput grows with them, while tensor parallel "
                    "would split weights that already fit and add an all-reduce per layer to every token")
        else:
            why += "Every further GPU is another copy (data parallel), never a split"
        return why + (", with the experts spread over the copies (expert parallel)" if lay.ep else "")
    how = (f"tensor parallel over {lay.tp} GPUs of a node" if lay.pp == 1 else
           f"{lay.pp} pipeline stages" + (f" of TP {lay.tp}" if lay.tp > 1 else "")
           + (" across nodes" if gpus.nodes > 1 else " (no NVLink: stages pass activations once per stage, "
              "TP would all-reduce every layer over PCIe)"))
    why = f"the {_gib(arch.params * arch.dtype_bytes)} of weights need {lay.split} GPUs: {how}"
    if lay.dp > 1:
        why += f", then {lay.dp} copies (data parallel)"
    return why + (", experts spread over TP x DP (expert parallel)" if lay.ep else "")


def _settings(runner: Runner, best: Option) -> list[str]:
    if not runner.engine_key:
        return ["(a model outside the profile: pass the flags to vllm serve)"]
    prefix = f"RAGSERVE_ENGINE__{runner.engine_key.upper()}__"
    lay = best.layout
    out = [f"{prefix}TENSOR_PARALLEL_SIZE={lay.tp}"]
    if lay.pp > 1:
        out.append(f"{prefix}PIPELINE_PARALLEL_SIZE={lay.pp}")
    if lay.dp > 1:
        out.append(f"{prefix}DATA_PARALLEL_SIZE={lay.dp} (or {lay.dp} replicas of TP {lay.tp})")
    if lay.ep:
        out.append(f"{prefix}ENABLE_EXPERT_PARALLEL=true")
    return out
