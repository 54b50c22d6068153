"""The planner's arithmetic against cases worked by hand (GiB = 2**30 bytes; blocks of 16 tokens; margin
1.5 GiB per GPU unless said otherwise). Each comment is the calculation; the code must land on its numbers."""

from __future__ import annotations

import pytest

from service.runners.architectures import MODELS, architecture
from service.runners.planner import (
    GiB,
    Gpus,
    Layout,
    kv_bytes_per_token,
    memory,
    options,
    recommend,
    weights_per_gpu,
)

LLAMA = architecture("meta-llama/Meta-Llama-3-8B-Instruct")
A100X4 = Gpus(4, 80)


def test_llama3_8b_shape_is_the_one_the_brief_gives() -> None:
    assert (LLAMA.layers, LLAMA.hidden, LLAMA.heads, LLAMA.kv_heads, LLAMA.head_dim) == (32, 4096, 32, 8, 128)
    assert (LLAMA.params, LLAMA.max_context) == (8.03e9, 8192)


@pytest.mark.parametrize(("tp", "dp", "weights", "kv_bytes", "tokens"), [
    # budget 80 GiB x 0.90 = 72 GiB = 77,309,411,328 B; weights 8.03e9 x 2 B = 16,060,000,000 B;
    # margin 1.5 GiB = 1,610,612,736 B; KV per token 2 x 32 x 8 x 128 x 2 B = 131,072 B (128 KiB).
    # TP4: weights/GPU 4,015,000,000; KV = 77,309,411,328 - 4,015,000,000 - 1,610,612,736 = 71,683,798,592;
    #      per GPU per token 131,072 / 4 = 32,768 -> 71,683,798,592 // (16 x 32,768) = 136,725 blocks
    #      = 2,187,600 tokens; 2,187,600 / 8,192 = 267.04x
    (4, 1, 4_015_000_000, 71_683_798_592, 2_187_600),
    # TP2: weights/GPU 8,030,000,000; KV = 67,668,798,592; per token 65,536 -> 64,533 blocks = 1,032,528 tokens
    (2, 2, 8_030_000_000, 67_668_798_592, 1_032_528),
    # TP1: weights 16,060,000,000; KV = 59,638,798,592; per token 131,072 -> 28,437 blocks = 454,992 tokens
    (1, 4, 16_060_000_000, 59_638_798_592, 454_992),
])
def test_hugging_face_example_llama3_8b_on_4_a100_80gb(tp: int, dp: int, weights: int, kv_bytes: int,
                                                        tokens: int) -> None:
    m = memory(LLAMA, Layout(tp=tp, dp=dp), A100X4, utilization=0.90, max_model_len=8192, kv_dtype_bytes=2)
    assert m.weights == pytest.approx(weights)
    assert m.kv == pytest.approx(kv_bytes)
    assert m.tokens == tokens
    assert m.concurrency == pytest.approx(tokens / 8192)


def test_hugging_face_example_lists_the_three_layouts_and_chooses_throughput() -> None:
    """TP x DP = 4 GPUs: TP4 x DP1 (default: one copy, most KV per copy), TP2 x DP2 (balanced), TP1 x DP4
    (max throughput). All three fit, so the smallest split wins: four copies."""
    found = options(LLAMA, A100X4, utilization=0.90, max_model_len=8192, kv_dtype_bytes=2)
    assert [o.layout.label for o in found] == ["TP4 x DP1", "TP2 x DP2", "TP1 x DP4"]
    assert all(o.fits for o in found)
    per_copy = [o.memory.tokens for o in found]
    assert per_copy == sorted(per_copy, reverse=True), "higher TP: more KV (longer contexts) per copy"
    best = recommend(found, A100X4)
    assert best is not None and best.layout == Layout(tp=1, dp=4)
    assert best.layout.flags(0.9) == ["--tensor-parallel-size", "1", "--data-parallel-size", "4",
                                      "--gpu-memory-utilization", "0.9"]


def test_llama3_70b_on_8_h100_needs_tp2_then_four_copies() -> None:
    """The Inference Endpoints guide's second example. 70.55e9 x 2 B = 141.1e9 B = 131.4 GiB:
    TP1: 131.4 + 1.5 > 72 GiB, no. TP2: 70,550,000,000 B per GPU; KV = 77,309,411,328 - 70,550,000,000 -
    1,610,612,736 = 5,148,798,592 B; per token 2 x 80 x (8 / 2) x 128 x 2 = 163,840 B -> 5,148,798,592 //
    2,621,440 = 1,964 blocks = 31,424 tokens, 3.84 sequences of 8,192: it fits, so TP2 x DP4."""
    seventy = architecture("meta-llama/Meta-Llama-3-70B-Instruct")
    found = options(seventy, Gpus(8, 80), utilization=0.90, max_model_len=8192, kv_dtype_bytes=2)
    best = recommend(found, Gpus(8, 80))
    assert best is not None and best.layout == Layout(tp=2, dp=4)
    assert best.memory.tokens == 31_424
    assert not next(o for o in found if o.layout.tp == 1).fits


def test_fp8_kv_cache_holds_twice_the_tokens() -> None:
    """Qwen3-VL-32B, TP4 on 24 GiB GPUs at 0.90: budget 21.6 GiB = 23,192,823,398.4 B; weights
    33.36e9 x 2 / 4 = 16,680,000,000 B; KV = 23,192,823,398.4 - 16,680,000,000 - 1,610,612,736 = 4,902,210,662.4 B.
    bf16: per token 2 x 64 x (8 / 4) x 128 x 2 = 65,536 B -> 4,675 blocks = 74,800 tokens (9.13x at 8,192);
    fp8: 32,768 B -> 9,350 blocks = 149,600 tokens (18.26x)."""
    vl = architecture("Qwen/Qwen3-VL-32B-Instruct")
    bf16, fp8 = (memory(vl, Layout(tp=4), Gpus(4, 24), utilization=0.9, max_model_len=8192, kv_dtype_bytes=b)
                 for b in (2, 1))
    assert bf16.kv == pytest.approx(4_902_210_662.4)
    assert (bf16.tokens, fp8.tokens) == (74_800, 149_600)
    assert fp8.concurrency == pytest.approx(2 * bf16.concurrency)


def test_qwen3_vl_32b_does_not_fit_one_or_two_24gb_gpus() -> None:
    """62.14 GiB of weights: alone 62.14 + 1.5 > 21.6; over TP2, 31.07 + 1.5 > 21.6; over TP4 it fits."""
    vl = architecture("Qwen/Qwen3-VL-32B-Instruct")
    found = {o.layout.tp: o for o in options(vl, Gpus(4, 24), utilization=0.9, max_model_len=8192, kv_dtype_bytes=2)}
    assert not found[1].fits and not found[2].fits and found[4].fits
    assert "exceed" in found[2].refusals[0]
    best = recommend(list(found.values()), Gpus(4, 24))
    assert best is not None and best.layout == Layout(tp=4)


def test_without_nvlink_a_split_is_pipeline_stages() -> None:
    """Same 4 x 24 GiB, PCIe only: the 4-GPU split becomes PP4 (one hand-off per stage) instead of TP4 (an
    all-reduce per layer over PCIe). Per GPU: 64 / 4 = 16 layers x 8 KV heads -> the same 65,536 B per token."""
    vl = architecture("Qwen/Qwen3-VL-32B-Instruct")
    pcie = Gpus(4, 24, nvlink=False)
    best = recommend(options(vl, pcie, utilization=0.9, max_model_len=8192, kv_dtype_bytes=2), pcie)
    assert best is not None and best.layout == Layout(tp=1, pp=4)
    assert kv_bytes_per_token(vl, Layout(pp=4), 2) == kv_bytes_per_token(vl, Layout(tp=4), 2) == 65_536
    assert best.layout.flags(0.9)[:4] == ["--tensor-parallel-size", "1", "--pipeline-parallel-size", "4"]


def test_across_nodes_tp_stays_in_a_node_and_pp_spans_them() -> None:
    """2 nodes x 2 A100 40 GB for the 70B model: 131.4 GiB needs at least 4 GPUs at 36 GiB each
    (131.4 / 4 = 32.85 + 1.5 = 34.35 <= 36). TP4 would span nodes: refused; TP2 x PP2 is the answer."""
    seventy = architecture("meta-llama/Meta-Llama-3-70B-Instruct")
    two_nodes = Gpus(4, 40, nodes=2)
    found = options(seventy, two_nodes, utilization=0.9, max_model_len=4096, kv_dtype_bytes=2)
    tp4 = next(o for o in found if o.layout.tp == 4)
    assert "spans nodes" in tp4.refusals[0]
    best = recommend(found, two_nodes)
    assert best is not None and best.layout == Layout(tp=2, pp=2)


def test_tp_beyond_kv_heads_replicates_them() -> None:
    """Qwen3-30B-A3B has 4 KV heads: over TP 8 each GPU still holds one (vLLM replicates), not half."""
    moe = architecture("Qwen/Qwen3-30B-A3B")
    assert kv_bytes_per_token(moe, Layout(tp=8), 2) == 2 * 48 * 1 * 128 * 2
    assert kv_bytes_per_token(moe, Layout(tp=2), 2) == 2 * 48 * 2 * 128 * 2


def test_expert_parallel_spreads_the_experts_over_tp_x_dp() -> None:
    """Qwen3-30B-A3B, TP1 x DP4 with EP: dense part (30.53 - 28.99)e9 x 2 = 3.08e9 B on every GPU, experts
    28.99e9 x 2 / 4 = 14.495e9 B: 17.575e9 B (16.37 GiB) per GPU, where plain DP4 would hold 61.06e9 B each.
    On 24 GiB at 0.9: KV = 23,192,823,398.4 - 17,575,000,000 - 1,610,612,736 = 4,007,210,662.4 B; per token
    2 x 48 x 4 x 128 x 2 = 98,304 B -> 2,547 blocks = 40,752 tokens."""
    moe = architecture("Qwen/Qwen3-30B-A3B")
    assert weights_per_gpu(moe, Layout(dp=4, ep=True)) == pytest.approx(17.575e9)
    assert weights_per_gpu(moe, Layout(dp=4)) == pytest.approx(61.06e9)
    found = options(moe, Gpus(4, 24), utilization=0.9, max_model_len=8192, kv_dtype_bytes=2)
    assert all(o.layout.ep for o in found), "every layout over several GPUs spreads the experts"
    best = recommend(found, Gpus(4, 24))
    assert best is not None and best.layout == Layout(dp=4, ep=True) and best.memory.tokens == 40_752
    assert "--enable-expert-parallel" in best.layout.flags(0.9)


def test_heads_must_split_evenly() -> None:
    """Qwen3-VL-32B: 64 text heads and 16 vision heads; TP 3 splits neither."""
    vl = architecture("Qwen/Qwen3-VL-32B-Instruct")
    found = options(vl, Gpus(3, 80), utilization=0.9, max_model_len=8192, kv_dtype_bytes=2)
    tp3 = next(o for o in found if o.layout.tp == 3)
    assert "do not split over TP 3" in tp3.refusals[0]


def test_encoders_keep_no_kv_cache() -> None:
    minilm = architecture("sentence-transformers/all-MiniLM-L6-v2")
    m = memory(minilm, Layout(), Gpus(1, 16), utilization=0.2, max_model_len=256, kv_dtype_bytes=2)
    assert m.kv_per_token == 0 and m.tokens == 0
    assert recommend(options(minilm, Gpus(1, 16), utilization=0.2, max_model_len=256, kv_dtype_bytes=2),
                     Gpus(1, 16)) is not None


def test_every_model_in_the_table_has_a_consistent_shape() -> None:
    for arch in MODELS.values():
        assert arch.heads % arch.kv_heads == 0, arch.name
        assert arch.params > arch.expert_params >= 0, arch.name
    assert GiB == 2**30


def test_gpus_must_spread_evenly_over_nodes() -> None:
    with pytest.raises(ValueError, match="do not spread evenly"):
        Gpus(3, 80, nodes=2)
