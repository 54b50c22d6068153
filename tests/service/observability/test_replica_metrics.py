"""Per-replica series on the app's /metrics: in flight, chosen, errors by kind, up."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from service.config import Settings
from tests.support.app import API_KEY, app_client
from tests.support.replicas import FakeReplicas, eventually

A, B = "10.0.0.1:8101", "10.0.0.2:8101"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name.startswith("ragserve_runner_replica")}


async def test_each_replica_has_its_series(tmp_path: Path) -> None:
    fake = FakeReplicas().add(A, B)
    fake[A].down = True
    fake[B].hold = asyncio.Event()
    settings = Settings(profile="minilm", data_dir=tmp_path, api_keys=[API_KEY],
                        runners={"embed_url": f"http://{A},http://{B}"},
                        upstream={"breaker_threshold": 1, "health_interval_s": 60, "probe_interval_s": 60})
    async with app_client(settings, transports={"embedding": fake.transport()}) as client:
        held = asyncio.create_task(client.post("/v1/embeddings", json={"input": "hello"}))
        await eventually(lambda: fake[B].in_flight == 1)
        text = (await client.get("/metrics")).text
        fake[B].hold.set()
        answered = await held
    # B answered (the metrics below were read while the call was still held there)
    assert answered.status_code == 200, answered.text
    assert [d["index"] for d in answered.json()["data"]] == [0]
    got = samples(text)
    a = (("replica", f"http://{A}"), ("runner", "embedding"))
    b = (("replica", f"http://{B}"), ("runner", "embedding"))
    # the first pick is A (settings order, both idle): refused, out, and the call moved on to B
    assert got[("ragserve_runner_replica_in_flight", b)] == 1 and got[("ragserve_runner_replica_in_flight", a)] == 0
    assert got[("ragserve_runner_replica_chosen_total", a)] == 1 and got[("ragserve_runner_replica_chosen_total", b)] == 1
    assert got[("ragserve_runner_replica_errors_total", (("kind", "connect"), *a))] == 1
    assert got[("ragserve_runner_replica_errors_total", (("kind", "connect"), *b))] == 0
    assert got[("ragserve_runner_replica_up", a)] == 0 and got[("ragserve_runner_replica_up", b)] == 1
