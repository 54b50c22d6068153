"""Turn an image (and the user's words, if any) into a text query the embedding model can search with.

The VL model writes a short description with the text visible in the image; the user's own words are kept
in front of it, so the intent survives a poor description. Greedy decoding: the same image and words give
the same query (and vLLM's prefix cache serves the repeated image).
"""

from __future__ import annotations

from dataclasses import dataclass

from service.generation.prompts import image_query_messages
from service.media.images import PreparedImage
from service.upstream.errors import UpstreamError
from service.upstream.generation import GenerationClient


@dataclass(frozen=True)
class ImageQuery:
    generated: str
    """What the VL model wrote."""
    retrieval_query: str
    """What is embedded and reranked: the user's words, then the generated description."""


class ImageQueryWriter:
    def __init__(self, generator: GenerationClient, *, max_tokens: int = 64, max_chars: int = 4096) -> None:
        self.generator = generator
        self.max_tokens = max_tokens
        self.max_chars = max_chars

    async def write(self, image: PreparedImage, text: str = "") -> ImageQuery:
        body = {
            "model": self.generator.model.name,
            "messages": image_query_messages(image.data_url, text),
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
        }
        generated = " ".join((await self.generator.complete_text(body)).split())
        parts = [p for p in (text.strip(), generated) if p]
        if not parts:
            raise UpstreamError(self.generator.runner.name, "wrote an empty search query for the image")
        return ImageQuery(generated=generated, retrieval_query="\n".join(parts)[: self.max_chars])
