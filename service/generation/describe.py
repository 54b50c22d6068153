"""Describe one picture with the generator: the text it shows, transcribed, then what the figure is.

The indexer's describer (:mod:`indexer.vision`) calls this once per picture. Each call is a bulk-lane request
(:meth:`~service.upstream.generation.GenerationClient.complete_bulk`): a job describing hundreds of pictures
keeps at most ``bulk_max_inflight`` of them at the runner, so a chat's time to first token does not wait behind
the job. It is routed by the prompt prefix like chat (the fixed system prompt, then the picture), so a
picture met again goes to the replica that has it cached. Greedy decoding with a bounded answer: the same
picture gives the same description, and the call is safe to retry inside its deadline.
"""

from __future__ import annotations

from service.generation.prompts import DESCRIBE_PROMPT_VERSION, describe_messages
from service.media.images import PreparedImage
from service.upstream.errors import UpstreamError
from service.upstream.generation import GenerationClient


class ImageDescriber:
    def __init__(self, generator: GenerationClient, *, max_tokens: int, timeout_s: float) -> None:
        self.generator = generator
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s

    @property
    def identity(self) -> str:
        """What makes two descriptions of one picture alike: the model, the prompt, the answer's length."""
        return f"vl {self.generator.model.name} prompt v{DESCRIBE_PROMPT_VERSION} max-tokens {self.max_tokens}"

    async def describe(self, image: PreparedImage) -> str:
        """The description, whitespace tidied; raises an :class:`UpstreamError` (a timeout is
        :class:`~service.upstream.errors.UpstreamTimeout`) or :class:`~service.errors.Overloaded` when no bulk
        slot came free within the deadline."""
        body = {
            "model": self.generator.model.name,
            "messages": describe_messages(image.data_url),
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
        }
        text = await self.generator.complete_bulk(body, timeout_s=self.timeout_s, idempotent=True)
        lines = [" ".join(line.split()) for line in text.strip().splitlines()]
        described = "\n".join(line for line in lines if line)
        if not described:
            raise UpstreamError(self.generator.runner.name, "wrote an empty description of the picture")
        return described
