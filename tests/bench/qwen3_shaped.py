"""A Qwen3-0.6B-shaped embedding checkpoint with random weights, for throughput figures at the production model's
speed (``../shared/docs/cpu-test-environment.md``: same shape, same speed; the values mean nothing).

The shape is ``tests/bench/gpu.py``'s (hidden 1024, 28 layers, 16/8 heads, head_dim 128, intermediate 3072,
vocab 151,669). The byte-level BPE tokenizer is trained on SciFact itself (``tests/support/tiny_qwen3.py:
build_tokenizer``, 32k merges), so its token counts on SciFact are near a real tokenizer's (about 1.3 tokens
a word) rather than the tiny test tokenizer's letter-by-letter counts. sentence-transformers files
(last-token pooling, normalised, as Qwen3-Embedding ships) sit beside it, so the peers load the same folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.gpu import QWEN3_06B
from tests.support.tiny_qwen3 import SPECIAL_TOKENS, build_tokenizer

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / ".ragserve" / "bench-cache" / "qwen3-0.6b-shaped"


def scifact_texts() -> list[str]:
    from tests.bench.bench_indexing import SCIFACT

    return [f"{d.get('title', '')} {d['text']}" for d in map(json.loads, SCIFACT.read_text().splitlines())]


def build(out: Path = FOLDER, *, seed: int = 0) -> Path:
    """Build once (about 2.4 GB of float32 weights); an existing folder is reused."""
    if (out / "model.safetensors").is_file() or (out / "model.safetensors.index.json").is_file():
        return out
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out, vocab_size=32_000, specials=SPECIAL_TOKENS, corpus=scifact_texts())
    config = Qwen3Config(**QWEN3_06B, tie_word_embeddings=True, rms_norm_eps=1e-6,
                         bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
                         eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"), torch_dtype="float32")
    torch.manual_seed(seed)
    Qwen3ForCausalLM(config).save_pretrained(out, safe_serialization=True)
    (out / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512, "do_lower_case": False}))
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": QWEN3_06B["hidden_size"], "pooling_mode_lasttoken": True,
        "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": False, "include_prompt": True}))
    (out / "2_Normalize").mkdir(exist_ok=True)
    return out


if __name__ == "__main__":
    print(build())
