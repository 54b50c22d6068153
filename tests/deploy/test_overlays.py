"""deploy/kubernetes/overlays/: each overlay rendered by kustomize (`kubectl kustomize`, as `kubectl apply -k`
renders it), validated against Kubernetes' schemas, and held to the launcher: every runner's command line
is the one `ragserve runners up` would start from that overlay's own ragserve-config."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

import pytest

from service.config import Settings
from service.runners.launcher import RunnerSpec, runner_specs
from service.runners.plan_report import plan_runner, profile_runners
from service.runners.planner import Gpus
from tests.deploy.manifests import (
    OVERLAYS,
    K8sObject,
    container_argv,
    container_env,
    flag_value,
    kustomize_command,
    launcher_argv,
    launcher_env,
    model_flags,
    pod_containers,
    pod_labels,
    render,
    selects,
)
from tests.deploy.test_schemas import OLDEST_KUBERNETES

NAMES = ["single-gpu", "data-parallel", "tensor-parallel"]

if kustomize_command() is None:  # CI must render them; elsewhere kubectl may be missing
    if os.environ.get("CI"):
        pytest.fail("no kustomize to render the overlays: install kubectl 1.27+ (or kustomize)", pytrace=False)
    pytest.skip("no kubectl or kustomize on PATH", allow_module_level=True)


def objects(name: str) -> tuple[K8sObject, ...]:
    return render(OVERLAYS / name)


def one(name: str, kind: str, obj: str) -> dict[str, Any]:
    [found] = [o.body for o in objects(name) if o.kind == kind and o.name == obj]
    return found


def config(name: str) -> dict[str, str]:
    return {k: str(v) for k, v in one(name, "ConfigMap", "ragserve-config")["data"].items()}


def settings(name: str) -> Settings:
    mp = pytest.MonkeyPatch()
    try:
        for k in list(os.environ):
            if k.upper().startswith("RAGSERVE_"):
                mp.delenv(k)
        for k, v in config(name).items():
            mp.setenv(k, v)
        return Settings()
    finally:
        mp.undo()


def runners(name: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Served model -> (workload, container) for every runner container of the rendered overlay."""
    out = {}
    for o in objects(name):
        if o.kind in ("Deployment", "StatefulSet"):
            for c in pod_containers(o.body):
                if "--served-model-name" in (argv := container_argv(c)):
                    out[flag_value(argv, "--served-model-name")] = (o.body, c)
    return out


def launcher(name: str) -> dict[str, RunnerSpec]:
    return {s.served_name: s for s in runner_specs(settings(name), cpu=False)}


def gpus_of(container: dict[str, Any]) -> int:
    return int(container["resources"]["limits"]["nvidia.com/gpu"])


@pytest.mark.parametrize("name", NAMES)
def test_overlay_renders_and_matches_the_kubernetes_schemas(name: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    assert objects(name), name
    for version in (OLDEST_KUBERNETES, kubernetes_validate.latest_version()):
        for obj in objects(name):
            try:
                kubernetes_validate.validate(obj.body, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{name}: {obj.kind}/{obj.name} on Kubernetes {version}: {exc.message}")


@pytest.mark.parametrize("name", NAMES)
def test_overlay_runners_are_the_launchers(name: str) -> None:
    deployed, expected = runners(name), launcher(name)
    assert set(deployed) == set(expected), "one runner per model of the overlay's profile"
    for served, spec in expected.items():
        _, container = deployed[served]
        argv = container_argv(container)
        assert model_flags(argv) == model_flags(launcher_argv(spec)), f"{name}: {served}"
        assert launcher_env(container_env(container)) == spec.env, f"{name}: {served}"
        assert flag_value(argv, "--model") == spec.checkpoint
        assert int(flag_value(argv, "--port")) == spec.port


@pytest.mark.parametrize("name", NAMES)
def test_overlay_runner_gpus_match_their_parallelism(name: str) -> None:
    for served, (_, container) in runners(name).items():
        argv = container_argv(container)
        tp = int(flag_value(argv, "--tensor-parallel-size"))
        pp = int(flag_value(argv, "--pipeline-parallel-size")) if "--pipeline-parallel-size" in argv else 1
        dp = int(flag_value(argv, "--data-parallel-size")) if "--data-parallel-size" in argv else 1
        assert gpus_of(container) == tp * pp * dp, f"{name}: {served}"


@pytest.mark.parametrize("name", NAMES)
def test_overlay_urls_reach_the_runner_ports(name: str) -> None:
    """Each runner URL names a Service of the overlay that selects that runner's pods on its --port."""
    env, deployed = config(name), runners(name)
    specs = {s.name: s for s in runner_specs(settings(name), cpu=False)}
    services = {o.name: o.body for o in objects(name) if o.kind == "Service"}
    for setting, runner in (("RAGSERVE_RUNNERS__EMBED_URL", "embedding"), ("RAGSERVE_RUNNERS__RERANK_URL", "rerank"),
                            ("RAGSERVE_RUNNERS__GENERATE_URL", "generate")):
        url = urlparse(env[setting])
        service = services[url.hostname or ""]
        workload, container = deployed[specs[runner].served_name]
        assert selects({"matchLabels": service["spec"]["selector"]}, pod_labels(workload)), setting
        [port] = [p for p in service["spec"]["ports"] if p["port"] == url.port]
        named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        target = port.get("targetPort", port["port"])
        assert named.get(target, target) == int(flag_value(container_argv(container), "--port")), setting


# ------------------------------------------------------------------------------------------ single-gpu


def test_single_gpu_runners_fit_one_gpu_and_start_in_order() -> None:
    deployed = runners("single-gpu")
    workloads = {id(w): w for w, _ in deployed.values()}
    assert len(workloads) == 1, "one pod: Kubernetes orders the start of containers, not of pods"
    [pod] = workloads.values()
    assert pod["spec"]["replicas"] == 1 and pod["spec"]["strategy"] == {"type": "Recreate"}
    order = [flag_value(container_argv(c), "--served-model-name") for c in pod_containers(pod)]
    specs = launcher("single-gpu")
    assert order == list(specs), "embedding, then rerank, then the generator (its profiling pass is largest)"
    shares = [float(flag_value(container_argv(c), "--gpu-memory-utilization")) for c in pod_containers(pod)]
    assert shares == [0.2, 0.2, 0.5] and round(sum(shares), 6) <= 0.9
    for sidecar in pod_containers(pod)[:-1]:
        assert sidecar["startupProbe"]["httpGet"]["path"] == "/health", "the next one waits for this probe"


# --------------------------------------------------------------------------------------- data-parallel


def test_data_parallel_pools_point_at_headless_services_of_ready_replicas() -> None:
    env = config("data-parallel")
    for setting in ("RAGSERVE_RUNNERS__EMBED_URL", "RAGSERVE_RUNNERS__RERANK_URL", "RAGSERVE_RUNNERS__GENERATE_URL"):
        url = urlparse(env[setting])
        assert url.scheme == "dns+http", f"{setting}: a name that resolves to every replica"
        service = one("data-parallel", "Service", url.hostname or "")
        assert service["spec"]["clusterIP"] == "None"
        assert not service["spec"].get("publishNotReadyAddresses"), "a replica still loading gets no traffic"
    for workload, _ in runners("data-parallel").values():
        assert workload["spec"]["replicas"] >= 2


def test_data_parallel_runners_stay_private() -> None:
    """The replicas keep the label the base NetworkPolicy admits ragserve pods to, and nothing else."""
    [policy] = [o.body for o in objects("data-parallel") if o.kind == "NetworkPolicy" and o.name == "runners-from-ragserve"]
    for workload, _ in runners("data-parallel").values():
        assert selects(policy["spec"]["podSelector"], pod_labels(workload))
    [rule] = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "ragserve"}}}]


# ------------------------------------------------------------------------------------- tensor-parallel


def test_tensor_parallel_generator_is_the_planners_answer_for_one_24gb_node() -> None:
    """The large profile's generator over the 4 GPUs of one pod (one node): the planner, fed the overlay's
    own settings, finds 4 the smallest tensor-parallel size that fits 24 GB GPUs."""
    s = settings("tensor-parallel")
    assert s.profile == "qwen3-large"
    generate = next(r for r in profile_runners(s) if r.name == "generate")
    plan = plan_runner(generate, Gpus(4, 24), utilization=0.9)
    assert plan.choice is not None
    _, container = runners("tensor-parallel")[generate.arch.name]
    assert int(flag_value(container_argv(container), "--tensor-parallel-size")) == plan.choice.layout.tp == 4
    assert s.engine.generate.tensor_parallel_size == 4 and gpus_of(container) == 4
    for served, (_, c) in runners("tensor-parallel").items():
        if served != generate.arch.name:
            assert gpus_of(c) == 1, f"{served} fits one GPU: data parallel, never split"
