"""Build a tiny random-weight Qwen3-VL checkpoint (and a tiny random LoRA adapter for it) at test time.

Same architecture as Qwen/Qwen3-VL-2B-Instruct (``Qwen3VLForConditionalGeneration``: a Qwen3 text model with
interleaved M-RoPE, a ViT with patch 16, 2×2 merge and deepstack), so vLLM runs its real Qwen3-VL code:
the HF image processor, the vision encoder, the processor cache and the prefix cache keyed on the image.
It is tiny (text hidden 128, 2 layers, head_dim 64; vision depth 2, hidden 128) and its ~1k-token byte-level
BPE tokenizer is trained on the spot, with the vision special tokens whose ids the config names. Random
weights give meaningless text: tests assert on shapes, flags, errors, determinism and differences, never on
the answer's meaning.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.tiny_qwen3 import SPECIAL_TOKENS, build_tokenizer

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
MAX_PIXELS = 896 * 896
"""The image processor's ``longest_edge`` (a pixel count for Qwen2-VL processors): ragserve's default max side."""

# OpenAI-format content (a list of parts): image parts become the vision placeholder, in place.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|im_start|>{{ message['role'] }}\n"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' or part['type'] == 'image_url' -%}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}<|im_end|>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)
_CORPUS = [
    "Describe the image and any visible text in one short line for a search engine.",
    "Answer the question using only the numbered context passages and cite them like [1].",
    "The quick brown fox jumps over the lazy dog. 0123456789 [1] [2] [3]",
    "router reset button screenshot chart photo device label error message",
    "Retrieval augmented generation embeds documents and searches a vector database.",
    "system user assistant Context: Question: Sources:",
]


def build_tiny_qwen3_vl(out_dir: Path, *, seed: int = 0) -> Path:
    """Write a tiny random ``Qwen3VLForConditionalGeneration`` with tokenizer and processor configs."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out_dir, specials=SPECIAL_TOKENS + VISION_TOKENS, corpus=_CORPUS,
                                chat_template=CHAT_TEMPLATE)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS + VISION_TOKENS}
    config = Qwen3VLConfig(
        text_config={
            "vocab_size": len(tokenizer), "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "max_position_embeddings": 32768,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5_000_000.0,
                                "mrope_section": [12, 10, 10], "mrope_interleaved": True},
            "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2, "hidden_size": 128, "intermediate_size": 256, "num_heads": 2, "patch_size": 16,
            "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 128,
            "num_position_embeddings": 2304, "deepstack_visual_indexes": [0],
        },
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    config.eos_token_id = ids["<|im_end|>"]
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config).to(torch.float32)
    with torch.no_grad():  # random init is near zero; widen it so greedy outputs depend on the input
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.08)
    model.save_pretrained(out_dir, safe_serialization=True)
    image_processor = {
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen3VLProcessor",
        "do_resize": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True,
        "rescale_factor": 1 / 255, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
        "patch_size": 16, "merge_size": 2, "temporal_patch_size": 2,
        "size": {"shortest_edge": 32 * 32, "longest_edge": MAX_PIXELS},
    }
    (out_dir / "preprocessor_config.json").write_text(json.dumps(image_processor, indent=1))
    video_processor = {**image_processor, "video_processor_type": "Qwen3VLVideoProcessor", "fps": 2,
                       "size": {"shortest_edge": 32 * 32, "longest_edge": MAX_PIXELS * 4}}
    video_processor.pop("image_processor_type")
    (out_dir / "video_preprocessor_config.json").write_text(json.dumps(video_processor, indent=1))
    (out_dir / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]], "pad_token_id": ids["<|endoftext|>"]}))
    return out_dir


def build_tiny_lora(out_dir: Path, *, rank: int = 8, seed: int = 1) -> Path:
    """Write a random PEFT LoRA adapter for the tiny checkpoint's language model.

    LoRA's B matrices are zeros when training starts (the adapter is then a no-op); here both A and B are
    random and ``lora_alpha`` is large, so the adapter visibly changes greedy outputs.
    """
    import torch
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    hidden, inter, kv = 128, 256, 64
    shapes = {  # (in, out) per target module
        "q_proj": (hidden, 2 * 64), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (2 * 64, hidden),
        "gate_proj": (hidden, inter), "up_proj": (hidden, inter), "down_proj": (inter, hidden),
    }
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(2):
        for name, (fan_in, fan_out) in shapes.items():
            block = "self_attn" if name.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
            prefix = f"base_model.model.model.language_model.layers.{layer}.{block}.{name}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, fan_in, generator=gen) * 0.3
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(fan_out, rank, generator=gen) * 0.3
    save_file(tensors, str(out_dir / "adapter_model.safetensors"))
    (out_dir / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 4 * rank, "lora_dropout": 0.0,
        "bias": "none", "target_modules": LORA_TARGETS, "base_model_name_or_path": None,
        "fan_in_fan_out": False, "modules_to_save": None, "use_rslora": False, "use_dora": False,
    }, indent=1))
    return out_dir


if __name__ == "__main__":
    import sys

    root = Path(sys.argv[1])
    print(build_tiny_qwen3_vl(root / "model"), build_tiny_lora(root / "lora"))
