"""Counting tokens as the model that reads the context counts them.

A context's budget is counted with a real tokenizer: the generator's by default where the deployment has one
(it is what reads the context in a grounded chat), else the embedding model's; a request may name any model the
deployment serves. A model whose files are local (a checkpoint folder with ``tokenizer.json``, what the launcher
serves from) is counted here with the ``tokenizers`` library, the fast tokenizer vLLM itself loads from that file;
any other is counted by its runner's own ``/tokenize``. Special tokens are not counted: a context is a part of a
prompt, not a prompt.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

from service.errors import InvalidInput, RagserveError
from service.upstream.errors import UpstreamError
from service.upstream.runner import RunnerClient


class TokenizerUnavailable(RagserveError):
    status_code = 503
    type = "upstream_unavailable"
    code = "tokenizer_unavailable"


class TokenCounter(ABC):
    name: str
    """The served model name this counts for."""
    kind: str
    """``local`` (the model's tokenizer.json, here) or ``runner`` (its ``/tokenize``)."""

    @abstractmethod
    async def count(self, text: str) -> int: ...


class LocalCounter(TokenCounter):
    kind = "local"

    def __init__(self, name: str, folder: Path) -> None:
        self.name = name
        self.folder = folder

    async def count(self, text: str) -> int:
        try:
            tokenizer = _load(str(self.folder / "tokenizer.json"))
        except Exception as exc:  # a damaged or unreadable file: the deployment's problem, not the request's
            raise TokenizerUnavailable(f"the tokenizer of {self.name} could not be loaded from {self.folder}: "
                                       f"{exc}") from exc
        return len(tokenizer.encode(text, add_special_tokens=False).ids)


class RunnerCounter(TokenCounter):
    kind = "runner"

    def __init__(self, name: str, runner: RunnerClient) -> None:
        self.name = name
        self.runner = runner

    async def count(self, text: str) -> int:
        try:
            payload = await self.runner.post_json("/tokenize", {"model": self.name, "prompt": text,
                                                                "add_special_tokens": False}, lane="query")
            return int(payload["count"])
        except (UpstreamError, KeyError, TypeError, ValueError) as exc:
            raise TokenizerUnavailable(
                f"the tokenizer of {self.name} is not local and its runner's /tokenize did not answer: {exc}"
            ) from exc


@lru_cache(maxsize=8)
def _load(path: str) -> Tokenizer:
    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def counter_for(name: str, checkpoint: str | None, runner: RunnerClient) -> TokenCounter:
    """Local where ``checkpoint`` is a folder holding ``tokenizer.json``, else the runner's ``/tokenize``."""
    if checkpoint is not None and (Path(checkpoint) / "tokenizer.json").is_file():
        return LocalCounter(name, Path(checkpoint))
    return RunnerCounter(name, runner)


class Tokenizers:
    """The counters of the models a deployment serves, by served name, and the default one."""

    def __init__(self, counters: list[TokenCounter], default: str) -> None:
        self.counters = {c.name: c for c in counters}
        if default not in self.counters:
            raise ValueError(f"the default tokenizer {default!r} is not among {sorted(self.counters)}")
        self.default = default

    def get(self, name: str | None, *, param: str = "tokenizer") -> TokenCounter:
        if name is None:
            return self.counters[self.default]
        counter = self.counters.get(name)
        if counter is None:
            raise InvalidInput(f"unknown tokenizer {name!r}: this deployment serves {sorted(self.counters)}",
                               code="unknown_tokenizer", param=param)
        return counter
