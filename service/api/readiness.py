"""Readiness per capability: what this process can serve right now.

Each capability needs some dependencies (a runner, the store, the job queue); a capability is ``ok`` when all of
them answer, ``down`` when one does not, ``disabled`` when this deployment does not offer it (no reranker or
generator configured). ``/ready`` answers 200 while every *required* capability is ``ok``: by default only
``search``, so a generation or reranker outage never takes a replica out of its Service while it can still
search (chat then answers 503 ``generation_unavailable``); a pod that owns indexing asks for
``?require=indexing`` too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Literal

from service.api.state import Services

CAPABILITIES = ("search", "rerank", "generation", "indexing")
DEFAULT_REQUIRED = ("search",)
Status = Literal["ok", "down", "disabled"]

NEEDS: dict[str, tuple[str, ...]] = {
    "search": ("embedding_runner", "store"),
    "rerank": ("rerank_runner",),
    "generation": ("generation_runner",),
    "indexing": ("embedding_runner", "store", "job_queue"),
}
"""The checks each capability needs (one check is run once, however many capabilities need it)."""


@dataclass(frozen=True)
class Readiness:
    checks: dict[str, Status]
    capabilities: dict[str, Status]

    def serves(self, required: tuple[str, ...]) -> bool:
        return all(self.capabilities[c] == "ok" for c in required)


async def _queue_answers(services: Services) -> bool:
    try:
        await services.jobs.list(limit=1)
    except Exception:  # noqa: BLE001 - any failure of the queue means it cannot take jobs
        return False
    return True


async def readiness(services: Services) -> Readiness:
    probes: dict[str, Awaitable[bool]] = {
        "embedding_runner": services.embedder.runner.health(),
        "store": services.store.ping(),
        "job_queue": _queue_answers(services),
    }
    if services.reranker is not None:
        probes["rerank_runner"] = services.reranker.runner.health()
    if services.generator is not None:
        probes["generation_runner"] = services.generator.health()
    answers = await asyncio.gather(*probes.values())
    checks: dict[str, Status] = {name: "ok" if up else "down" for name, up in zip(probes, answers, strict=True)}
    capabilities: dict[str, Status] = {}
    for capability, needs in NEEDS.items():
        if any(n not in checks for n in needs):
            capabilities[capability] = "disabled"
        else:
            capabilities[capability] = "ok" if all(checks[n] == "ok" for n in needs) else "down"
    return Readiness(checks, capabilities)
