"""The physical limit on a GPU: the embedding and reranking forward passes of a Qwen3-0.6B-shaped model with random
weights (built here, on the spot: no model hub, no vLLM), in bf16 with PyTorch's SDPA attention, batched by
tokens; tokens/s and documents/s beside model-FLOPs utilisation against the GPU's bf16 peak.

    python tests/bench/gpu.py [--out DIR] [--docs 8192] [--budgets 16384,32768,65536] [--peak-tflops 790]
    python tests/bench/gpu.py --smoke          # a tiny model on the CPU, in seconds: the script's plumbing

It needs only torch and transformers (the lent H200 has both, and sentence-transformers, but no vLLM and no
network) and writes ``gpu.json`` and ``gpu.png`` (when matplotlib is there) under ``--out``, default ``$OUT``.
The model's speed is the real Qwen3-0.6B's: the same shape (hidden 1024, 28 layers, 16 heads, 8 KV heads,
head_dim 128, intermediate 3072, vocab 151,669); only the weights differ.

- Embedding: ``Qwen3Model`` over each document, last-token pooling (left padding), L2-normalised, as
  Qwen3-Embedding does.
- Reranking: the same trunk over Qwen3-Reranker's prompt (its system line, instruction and query, about
  ``--rerank-overhead`` tokens, around each document), with a 2-row head on the last token (yes/no), as vLLM
  runs it with ``classifier_from_token``.

Document lengths: SciFact's abstracts when ``../shared/data/scifact/corpus.jsonl`` is found (words x 1.3, a
Qwen-tokenizer ratio for English prose, capped at ``--max-len``), else a log-normal with the same median.
Documents are sorted by length and packed so a batch's padded size (rows x longest) stays within the budget,
as a token-budgeted server does. Model FLOPs per token (forward): 2 x the non-embedding parameters plus
4 x layers x heads x head_dim x (the attended context, half the padded length under the causal mask); MFU =
FLOPs/token x tokens/s / peak. A vLLM runner on the same GPU does the same arithmetic with fused kernels and
no padding; this figure is what it is bounded by, not what it reaches.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

QWEN3_06B = {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151_669, "max_position_embeddings": 32_768}
SMOKE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
         "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 1000, "max_position_embeddings": 1024}
SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "scifact" / "corpus.jsonl"


def doc_lengths(n: int, max_len: int, seed: int = 0) -> tuple[list[int], str]:
    import numpy as np

    rng = np.random.default_rng(seed)
    if SCIFACT.is_file():
        words = [len((d.get("title", "") + " " + d["text"]).split())
                 for d in map(json.loads, SCIFACT.read_text().splitlines()) if d.get("text")]
        base = np.minimum(np.ceil(np.asarray(words) * 1.3), max_len).astype(int)
        picked = base[rng.integers(0, len(base), n)] if n > len(base) else base[:n]
        return [max(int(x), 8) for x in picked], f"SciFact abstracts (words x 1.3, capped at {max_len})"
    lengths = np.minimum(rng.lognormal(math.log(280), 0.45, n), max_len).astype(int)
    return [max(int(x), 8) for x in lengths], f"log-normal, median 280, capped at {max_len}"


def flops_per_token(cfg: dict[str, int], context: float) -> float:
    h, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    params = layers * (h * q + 2 * h * kv + q * h + 3 * h * inter)
    return 2 * params + 4 * layers * q * context


def batches(lengths: list[int], budget: int) -> list[list[int]]:
    """Indices sorted by length, packed while rows x longest stays within ``budget``."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    out: list[list[int]] = [[]]
    for i in order:
        if out[-1] and lengths[i] * (len(out[-1]) + 1) > budget:  # sorted: the newcomer is the longest
            out.append([])
        out[-1].append(i)
    return out


def build(cfg: dict[str, int], device: str, dtype: Any) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3Model

    config = Qwen3Config(**cfg, rms_norm_eps=1e-6, tie_word_embeddings=False, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3Model(config).to(dtype).eval()
    head = torch.nn.Linear(cfg["hidden_size"], 2, bias=False, device=device, dtype=dtype)
    return model, head


def run(model: Any, head: Any | None, lengths: list[int], budget: int, device: str, vocab: int) -> dict[str, Any]:
    """One pass over every document in token-budgeted batches; the first two batches warm up (not timed)."""
    import torch

    groups = batches(lengths, budget)
    gen = torch.Generator(device="cpu").manual_seed(1)

    def inputs(group: list[int]) -> tuple[Any, Any]:
        longest = max(lengths[i] for i in group)
        ids = torch.randint(3, vocab, (len(group), longest), generator=gen)
        mask = torch.zeros((len(group), longest), dtype=torch.long)
        for row, i in enumerate(group):
            mask[row, longest - lengths[i]:] = 1  # left padding: the last position is every row's last token
        return ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)

    prepared = [inputs(g) for g in groups]
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def step(ids: Any, mask: Any) -> Any:
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state[:, -1]
        if head is None:
            return torch.nn.functional.normalize(hidden.float(), dim=-1)
        return torch.softmax(head(hidden).float(), dim=-1)[:, 1]

    with torch.inference_mode():
        for ids, mask in prepared[:2]:
            step(ids, mask)
        sync()
        started = time.perf_counter()
        for ids, mask in prepared:
            step(ids, mask)
        sync()
        wall = time.perf_counter() - started
    real = sum(lengths)
    padded = sum(max(lengths[i] for i in g) * len(g) for g in groups)
    context = sum(max(lengths[i] for i in g) * len(g) * max(lengths[i] for i in g) / 2 for g in groups) / padded
    return {"budget": budget, "batches": len(groups), "docs": len(lengths), "tokens": real, "padded_tokens": padded,
            "padding_share": 1 - real / padded, "wall_s": wall, "tokens_per_s": real / wall,
            "docs_per_s": len(lengths) / wall, "padded_tokens_per_s": padded / wall, "mean_context": context}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--docs", type=int, default=8192)
    parser.add_argument("--budgets", default="16384,32768,65536", help="padded tokens per batch, comma-separated")
    parser.add_argument("--max-len", type=int, default=512, help="longest document (the indexer's chunk window)")
    parser.add_argument("--rerank-overhead", type=int, default=100,
                        help="tokens of Qwen3-Reranker's prompt around a document (system, instruction, query)")
    parser.add_argument("--peak-tflops", type=float, default=790.0, help="the GPU's measured bf16 peak")
    parser.add_argument("--smoke", action="store_true", help="a tiny model on the CPU in float32, 32 documents")
    args = parser.parse_args()

    import torch

    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    if args.smoke:
        torch.set_num_threads(1)  # a tiny model: more threads only wait for each other on a busy machine
    cfg = SMOKE if args.smoke else QWEN3_06B
    dtype = torch.float32 if args.smoke else torch.bfloat16
    docs = 32 if args.smoke else args.docs
    budgets = [256, 1024] if args.smoke else [int(b) for b in args.budgets.split(",")]
    max_len = 64 if args.smoke else args.max_len
    lengths, source = doc_lengths(docs, max_len)
    started = time.perf_counter()
    model, head = build(cfg, device, dtype)
    build_s = time.perf_counter() - started
    name = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu"
    print(f"{'smoke: a tiny Qwen3' if args.smoke else 'Qwen3-0.6B'}-shaped random model built in {build_s:.1f}s on {name} "
          f"({dtype}); {docs} documents, {source}", flush=True)
    rows = []
    for task, overhead in (("embed", 0), ("rerank", args.rerank_overhead)):
        task_lengths = [n + overhead for n in lengths]
        for budget in budgets:
            r = run(model, head if task == "rerank" else None, task_lengths, budget, device, cfg["vocab_size"])
            flops = flops_per_token(cfg, r["mean_context"])
            r |= {"task": task, "flops_per_token": flops,
                  "mfu": flops * r["padded_tokens_per_s"] / (args.peak_tflops * 1e12),
                  "mfu_real_tokens": flops * r["tokens_per_s"] / (args.peak_tflops * 1e12)}
            rows.append(r)
            print(f"  {task:<6} budget {budget:>6}: {r['tokens_per_s']:>11,.0f} tokens/s, {r['docs_per_s']:>9,.1f} "
                  f"docs/s, padding {r['padding_share']:.1%}, MFU {r['mfu']:.1%} (real tokens only "
                  f"{r['mfu_real_tokens']:.1%})", flush=True)
    result = {"scenario": "gpu", "smoke": args.smoke, "device": name, "dtype": str(dtype), "config": cfg,
              "torch": torch.__version__, "build_s": build_s, "lengths": source, "peak_tflops": args.peak_tflops,
              "rows": rows, "note": "a vLLM runner on the same GPU is bounded by these figures (same model FLOPs, "
              "fused kernels, no padding); it does not reach them"}
    try:
        import transformers

        result["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover - build() needed it already
        pass
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out / 'gpu.json'}")
    try:
        plot(result, args.out / "gpu.png")
        print(f"wrote {args.out / 'gpu.png'}")
    except ImportError:
        print("matplotlib missing: no plot")


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for task, colour in (("embed", "tab:blue"), ("rerank", "tab:orange")):
        rows = [r for r in result["rows"] if r["task"] == task]
        axes[0].plot([r["budget"] for r in rows], [r["tokens_per_s"] for r in rows], "o-", color=colour, label=task)
        axes[1].plot([r["budget"] for r in rows], [r["mfu"] * 100 for r in rows], "o-", color=colour, label=task)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("padded tokens per batch")
        ax.legend()
    axes[0].set_ylabel("tokens/s (real tokens)")
    axes[1].set_ylabel(f"MFU, % of {result['peak_tflops']:g} TFLOP/s")
    fig.suptitle(f"Qwen3-0.6B-shaped forward passes on {result['device']} ({result['dtype']}, SDPA)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
