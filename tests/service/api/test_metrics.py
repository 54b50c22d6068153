"""``/metrics`` after searches through the app (scripted runner at the network edge, the store in its process):
each request counted by route template and status and timed, each search stage timed."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.app import app_client
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_requests_and_stages_are_counted_per_route_status_and_stage(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    async with app_client(scripted_settings(tmp_path), transports={"embedding": runner.transport}) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        r = await client.post("/v1/collections/kb/documents", json={"documents": [{"id": "a", "text": "vault keys"}]})
        assert r.status_code == 200, r.text
        for query in ("vault", "keys", "vault"):
            r = await client.post("/v1/search", json={"collection": "kb", "query": query, "mode": "dense"})
            assert r.status_code == 200, r.text
        assert (await client.post("/v1/search", json={"collection": "nope", "query": "x"})).status_code == 404
        metrics = await client.get("/metrics")
    samples = _samples(metrics.text)
    search = (("method", "POST"), ("route", "/v1/search"))
    assert samples[("ragserve_requests_total", (*search, ("status", "200")))] == 3
    assert samples[("ragserve_requests_total", (*search, ("status", "404")))] == 1
    assert samples[("ragserve_request_seconds_count", search)] == 4
    assert samples[("ragserve_stage_seconds_count", (("stage", "search"),))] == 3
    assert samples[("ragserve_stage_seconds_count", (("stage", "embed"),))] == 2  # the third was a cache hit
