"""The picture describer at the generator's network edge (``httpx.MockTransport``): the exact request it sends
(the fixed prompt, greedy, bounded tokens), the bulk lane (vLLM's priority, a bulk slot held), prefix-affinity
routing across two replicas, and a picture whose answer never comes within its deadline."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from service.generation.describe import ImageDescriber
from service.generation.prompts import DESCRIBE_INSTRUCTION, DESCRIBE_SYSTEM_PROMPT
from service.media.images import ImageLimits, PreparedImage, prepare_image
from service.profiles import GeneratorModel
from service.upstream.errors import UpstreamTimeout
from service.upstream.generation import GenerationClient
from service.upstream.runner import RunnerClient
from tests.support.images import noise_png

MODEL = GeneratorModel(name="tiny-vl", max_tokens=4096)
LIMITS = ImageLimits(max_bytes=1_000_000, max_pixels=1_000_000, max_side=256)
TWO_REPLICAS = "http://10.0.0.1:8104,http://10.0.0.2:8104"


def picture(seed: int) -> PreparedImage:
    return prepare_image(noise_png(32, seed), LIMITS)


def completion(text: str) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion", "model": MODEL.name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}


def describer(handler: Callable[[httpx.Request], Any], *, urls: str = "http://10.0.0.1:8104",
              bulk_priority: int = 0, timeout_s: float = 30.0) -> ImageDescriber:
    runner = RunnerClient("generate", urls, timeout_s=120.0, bulk_priority=bulk_priority, retries=0,
                          transport=httpx.MockTransport(handler))
    return ImageDescriber(GenerationClient(runner, MODEL), max_tokens=200, timeout_s=timeout_s)


async def test_the_request_is_the_fixed_prompt_greedy_and_bounded_in_the_bulk_lane() -> None:
    sent: list[dict[str, Any]] = []
    lanes_seen: list[dict[str, int]] = []
    d: ImageDescriber

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        lanes_seen.append(dict(d.generator.runner.lanes.in_flight))
        return httpx.Response(200, json=completion("  SALES 2024\n\n  A bar chart  of  sales by quarter. "))

    d = describer(handler)
    image = picture(1)
    text = await d.describe(image)
    await d.generator.runner.aclose()

    assert text == "SALES 2024\nA bar chart of sales by quarter."
    assert sent == [{
        "model": "tiny-vl",
        "messages": [
            {"role": "system", "content": DESCRIBE_SYSTEM_PROMPT},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image.data_url}},
                                         {"type": "text", "text": DESCRIBE_INSTRUCTION}]},
        ],
        "max_tokens": 200, "temperature": 0.0, "stream": False,
    }]
    assert lanes_seen == [{"query": 0, "bulk": 1}]
    assert "transcribe the text visible" in DESCRIBE_SYSTEM_PROMPT.lower()
    assert "describe the figure" in DESCRIBE_SYSTEM_PROMPT.lower()


async def test_a_picture_goes_to_its_prefix_replica_every_time() -> None:
    """Two replicas: the same picture always lands on one of them (its prefix is cached there); pictures differ
    in their keys, so a job's pictures spread over both."""
    hosts: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        url = json.loads(request.content)["messages"][1]["content"][0]["image_url"]["url"]
        hosts.append((url, request.url.host))
        return httpx.Response(200, json=completion("a picture"))

    d = describer(handler, urls=TWO_REPLICAS)
    images = [picture(seed) for seed in range(12)]
    for _ in range(3):
        for image in images:
            await d.describe(image)
    await d.generator.runner.aclose()

    by_picture: dict[str, set[str]] = {}
    for url, host in hosts:
        by_picture.setdefault(url, set()).add(host)
    assert len(by_picture) == 12 and all(len(h) == 1 for h in by_picture.values())
    assert {h for hs in by_picture.values() for h in hs} == {"10.0.0.1", "10.0.0.2"}


async def test_an_answer_that_never_comes_is_a_timeout_at_the_deadline() -> None:
    never = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        await never.wait()
        raise AssertionError("unreachable")

    d = describer(handler, timeout_s=0.2)
    with pytest.raises(UpstreamTimeout):
        await d.describe(picture(2))
    assert d.generator.runner.lanes.in_flight == {"query": 0, "bulk": 0}
    await d.generator.runner.aclose()


async def test_an_empty_answer_is_an_error_not_an_empty_chunk() -> None:
    d = describer(lambda request: httpx.Response(200, json=completion(" \n ")))
    with pytest.raises(Exception, match="empty description"):
        await d.describe(picture(3))
    await d.generator.runner.aclose()


def test_the_identity_names_the_model_the_prompt_version_and_the_length() -> None:
    d = describer(lambda request: httpx.Response(200))
    assert d.identity == "vl tiny-vl prompt v1 max-tokens 200"
