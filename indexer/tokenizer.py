"""The embedding model's own tokenizer, loaded locally (``tokenizers``), so chunk sizes are counted in the
tokens the runner will see."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

from service.config import Settings
from service.profiles import default_checkpoint, get_profile


def tokenizer_source(settings: Settings) -> str:
    profile = get_profile(settings.profile)
    return (settings.indexer.tokenizer_path or settings.runners.embed_model_path
            or default_checkpoint(profile.embedding))


@lru_cache(maxsize=4)
def load_tokenizer(source: str) -> Tokenizer:
    """From a checkpoint folder's ``tokenizer.json``, else from the hub by name (GPU hosts)."""
    path = Path(source)
    tok = Tokenizer.from_file(str(path / "tokenizer.json")) if path.is_dir() else Tokenizer.from_pretrained(source)
    tok.no_padding()
    tok.no_truncation()
    return tok
