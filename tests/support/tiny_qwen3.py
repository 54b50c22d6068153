"""Build tiny random-weight Qwen3 checkpoints at test time.

Same architecture as Qwen3-Embedding-0.6B / Qwen3-Reranker-0.6B (``Qwen3ForCausalLM``), the same special
tokens and the same width (hidden 1024, 16 heads, 8 KV heads, head_dim 128, so embeddings have the real
1024 dimensions and Matryoshka sizes), but 2 layers, a narrow MLP and a ~500-token vocabulary, so it
builds and loads in seconds. The byte-level BPE tokenizer is trained on the spot, so every input
encodes; "yes" and "no" are single plain tokens, as the reranker's classifier needs.
"""

from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_CORPUS = [
    "yes no yes no Yes No",
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided.",
    'Note that the answer can only be "yes" or "no".',
    "Instruct: Given a web search query, retrieve relevant passages that answer the query",
    "Query: Document: system user assistant",
    "The quick brown fox jumps over the lazy dog. 0123456789",
    "Retrieval augmented generation embeds documents and searches a vector database.",
    "Proteins, genes, cells and mutations; patients, trials and treatments.",
]


def build_tokenizer(  # type: ignore[no-untyped-def]
    out_dir: Path,
    vocab_size: int = 1024,
    *,
    specials: list[str] = SPECIAL_TOKENS,
    corpus: list[str] = _CORPUS,
    chat_template: str = CHATML,
):
    """A byte-level BPE tokenizer trained on ``corpus`` with Qwen's special tokens (and ``specials``),
    saved as a Hugging Face fast tokenizer with a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus * 20, trainer=trainer)
    for word in ("yes", "no"):
        if tok.token_to_id(word) is None:
            tok.add_tokens([word])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[t for t in specials if t not in ("<|endoftext|>", "<|im_end|>")],
    )
    fast.chat_template = chat_template
    fast.save_pretrained(out_dir)
    return fast


def build_tiny_qwen3(out_dir: Path, *, seed: int = 0) -> Path:
    """Write a tiny random ``Qwen3ForCausalLM`` with its tokenizer to ``out_dir`` and return it."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out_dir)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=1024,
        intermediate_size=1024,
        num_hidden_layers=2,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


if __name__ == "__main__":
    import sys

    print(build_tiny_qwen3(Path(sys.argv[1])))
