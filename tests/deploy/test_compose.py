"""deploy/gpu-host/compose.yaml: who is reachable, who waits for whom, and how the GPU is shared."""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.deploy.manifests import RUNNER_URL_SETTINGS, compose, compose_argv, compose_env, flag_value

RUNNER_IMAGE_PREFIX = "vllm/vllm-openai:"


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def runners() -> dict[str, dict[str, Any]]:
    return {n: s for n, s in services().items() if "--served-model-name" in compose_argv(s)}


def runner_serving(model: str) -> str:
    [name] = [n for n, s in runners().items() if flag_value(compose_argv(s), "--served-model-name") == model]
    return name


def networks_of(service: dict[str, Any]) -> set[str]:
    nets = service.get("networks") or ["default"]
    return set(nets) if isinstance(nets, list) else set(nets)


def internal_networks() -> set[str]:
    return {n for n, net in compose()["networks"].items() if net and net.get("internal")}


def waits_for(name: str) -> set[str]:
    """Every service ``name`` starts after, directly or through others, by a health condition."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for dependency, condition in (services()[todo.pop()].get("depends_on") or {}).items():
            if condition["condition"] == "service_healthy" and dependency not in seen:
                seen.add(dependency)
                todo.append(dependency)
    return seen


def test_only_the_api_is_published() -> None:
    published = {n for n, s in services().items() if s.get("ports")}
    assert published == {"ragserve"}
    assert all(s.get("network_mode") is None for s in services().values()), "host networking bypasses it all"
    [port] = services()["ragserve"]["ports"]
    assert port["target"] == 8000 and port["host_ip"] == "127.0.0.1", "loopback unless the operator opts out"


def test_runners_and_qdrant_live_on_an_internal_network_only() -> None:
    internal = internal_networks()
    assert internal, "an internal network is what keeps the runners private"
    for name in [*runners(), "qdrant"]:
        assert networks_of(services()[name]) <= internal, name
        assert not services()[name].get("expose"), name


def test_every_server_has_a_healthcheck_and_dependents_wait_for_it() -> None:
    healthy = {n for n, s in services().items()
               if s.get("healthcheck") and not s["healthcheck"].get("disable")}
    assert healthy == {*runners(), "qdrant", "ragserve"}
    for name, service in services().items():
        for dependency, condition in (service.get("depends_on") or {}).items():
            expected = "service_healthy" if dependency in healthy else "service_completed_successfully"
            assert condition["condition"] == expected, f"{name} -> {dependency}"
    assert set(services()["ragserve"]["depends_on"]) == {*runners(), "qdrant"}


def test_runner_healthchecks_ask_their_own_health_route() -> None:
    for name, service in runners().items():
        port = flag_value(compose_argv(service), "--port")
        assert f"http://127.0.0.1:{port}/health" in " ".join(service["healthcheck"]["test"]), name
    assert services()["ragserve"]["healthcheck"]["test"][-1] == "/ready"
    assert "/readyz" in " ".join(services()["qdrant"]["healthcheck"]["test"])


@pytest.mark.parametrize("setting", sorted(RUNNER_URL_SETTINGS))
def test_each_runner_is_private_and_ragserve_reaches_it(setting: str) -> None:
    """Per model, so that a runner missing from runners() cannot make the checks above pass vacuously."""
    name = runner_serving(RUNNER_URL_SETTINGS[setting])
    service = services()[name]
    assert not service.get("ports") and not service.get("expose"), name
    assert networks_of(service) <= internal_networks(), f"{name} must have no route in or out"
    url = urlparse(compose_env(services()["ragserve"])[setting])
    assert (url.hostname, url.port) == (name, int(flag_value(compose_argv(service), "--port")))
    assert services()["ragserve"]["depends_on"][name] == {"condition": "service_healthy"}


def test_runners_sharing_a_gpu_fit_and_start_one_after_the_other() -> None:
    by_gpu: dict[str, list[str]] = defaultdict(list)
    for name, service in runners().items():
        [device] = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["capabilities"] == ["gpu"]
        for gpu in device["device_ids"]:
            by_gpu[gpu].append(name)
    for gpu, names in by_gpu.items():
        shares = [float(flag_value(compose_argv(runners()[n]), "--gpu-memory-utilization")) for n in names]
        assert round(sum(shares), 6) <= 0.9, f"GPU {gpu}: {names} take {shares}; leave room for the CUDA contexts"
        # vLLM instances that profile one GPU at the same time mis-size each other (vllm-project/vllm#55827):
        # of any two runners on one GPU, one must wait for the other to be healthy.
        for a, b in combinations(names, 2):
            assert a in waits_for(b) or b in waits_for(a), f"GPU {gpu}: {a} and {b} may start together"


def test_models_service_fetches_what_the_runners_serve() -> None:
    """Runners run with HF_HUB_OFFLINE=1 on a network with no route out: the one-shot download must cover
    every checkpoint they load, into the cache they mount."""
    fetched = set(compose_argv(services()["models"])[3:])
    served = {flag_value(compose_argv(s), "--model") for s in runners().values()}
    assert fetched == served
    cache = services()["models"]["environment"]["HF_HOME"]
    for name, service in runners().items():
        assert service["environment"]["HF_HUB_OFFLINE"] == "1"
        assert service["environment"]["HF_HOME"] == cache
        assert any(v.split(":")[1] == cache for v in service["volumes"]), name


def test_api_and_workers_share_the_job_queue_volume() -> None:
    api, worker = services()["ragserve"], services()["worker"]
    assert api["command"] == ["serve"] and worker["command"] == ["worker"]
    assert "RAGSERVE_DATA_DIR" not in api["environment"], "the image's /data is where the volume is"
    data = [[v for v in s["volumes"] if v.endswith(":/data")] for s in (api, worker)]
    assert data[0] and data[0] == data[1]
    assert api["environment"] == worker["environment"]
    assert worker["healthcheck"] == {"disable": True}, "a worker has no HTTP server for the image's check"
