"""``passages``: a parsed file as the chunks the indexer stores (text and location), cut with the MiniLM
tokenizer, so parser tests assert what a search hit would carry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from indexer.chunking import Chunker
from indexer.documents import SourceFile
from indexer.parsers import parse
from indexer.tokenizer import load_tokenizer
from service.profiles import MINILM, default_checkpoint

Passages = Callable[..., list[tuple[str, dict[str, Any]]]]


@pytest.fixture(scope="session")
def passages() -> Passages:
    tokenizer = load_tokenizer(default_checkpoint(MINILM.embedding))

    def cut(name: str, data: bytes, *, size: int | None = None) -> list[tuple[str, dict[str, Any]]]:
        (doc,) = parse(SourceFile(name, data))
        chunks = Chunker(tokenizer, window=256, size=size, overlap=4).chunk(doc)
        for c in chunks:  # offsets cover the passage's own text in the document's full text
            start, end = c.location["char_start"], c.location["char_end"]
            assert c.text.endswith(doc.full_text[start:end])
        return [(c.text, {k: v for k, v in c.location.items() if not k.startswith("byte_")}) for c in chunks]

    return cut
