"""deploy/kubernetes/: exposure, network policy, probes, scaling axes, the workers on the PostgreSQL queue,
Qdrant's cluster mode. Parsed only; no cluster needed."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from service.api.readiness import CAPABILITIES, DEFAULT_REQUIRED
from tests.deploy.manifests import (
    KUBERNETES,
    RUNNER_URL_SETTINGS,
    K8sObject,
    config_env,
    container_argv,
    flag_value,
    k8s,
    k8s_objects,
    k8s_one,
    kustomization,
    pod_labels,
    pod_spec,
    selects,
    service_link_vars,
    setting_path,
    workloads,
)

RAGSERVE = {"app.kubernetes.io/name": "ragserve"}
CLUSTER_SCOPED = {"Namespace"}


def is_ragserve(workload: K8sObject) -> bool:
    return any(c["image"].startswith("ragserve:") for c in pod_spec(workload.body)["containers"])


def is_runner(workload: K8sObject) -> bool:
    return any("--served-model-name" in container_argv(c) for c in pod_spec(workload.body)["containers"])


def is_worker(workload: K8sObject) -> bool:
    """``ragserve worker``: claims jobs from the queue; serves no HTTP."""
    return is_ragserve(workload) and container_argv(pod_spec(workload.body)["containers"][0])[:1] == ["worker"]


def is_qdrant(workload: K8sObject) -> bool:
    return any(c["image"].startswith("qdrant/") for c in pod_spec(workload.body)["containers"])


def pods_selected(selector: dict[str, Any]) -> list[K8sObject]:
    return [w for w in workloads() if selects(selector, pod_labels(w.body))]


def container_port(workload: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    for container in pod_spec(workload)["containers"]:
        for p in container.get("ports", []):
            if p.get("name") == port:
                return int(p["containerPort"])
    raise AssertionError(f"no container port named {port}")


# ------------------------------------------------------------------------------------------- structure


def test_kustomization_lists_every_manifest() -> None:
    on_disk = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization()["resources"]) == on_disk


def test_everything_lives_in_the_kustomization_namespace() -> None:
    namespace = kustomization()["namespace"]
    assert k8s_one("Namespace", namespace)
    for obj in k8s_objects():
        if obj.kind not in CLUSTER_SCOPED:
            assert obj.body["metadata"].get("namespace") == namespace, f"{obj.kind}/{obj.name}"


def test_names_are_unique_per_kind() -> None:
    keys = [(o.kind, o.name) for o in k8s_objects()]
    assert len(keys) == len(set(keys))


def test_service_links_cannot_leak_into_settings() -> None:
    """A Service named e.g. `ragserve` would inject RAGSERVE_PORT=tcp://10.0.0.1:8000 into every pod, and
    Settings would fail to parse it as the API port. No Service name may produce a settings name, and pods
    opt out of service links anyway (vLLM reads VLLM_PORT the same way)."""
    for service in k8s("Service"):
        for var in service_link_vars(service.name, service.body["spec"]["ports"]):
            assert setting_path(var) is None, f"Service/{service.name} would inject {var}"
    for workload in workloads():
        assert pod_spec(workload.body).get("enableServiceLinks") is False, workload.name


# ------------------------------------------------------------------------------------------- exposure


def test_nothing_but_the_ingress_reaches_in_from_outside() -> None:
    for service in k8s("Service"):
        spec = service.body["spec"]
        assert spec.get("type", "ClusterIP") == "ClusterIP", service.name
        assert not spec.get("externalIPs"), service.name
    for workload in workloads():
        spec = pod_spec(workload.body)
        assert not spec.get("hostNetwork"), workload.name
        for container in spec["containers"]:
            assert not any("hostPort" in p for p in container.get("ports", [])), workload.name


def test_ingress_routes_only_to_ragserve() -> None:
    for ingress in k8s("Ingress"):
        for rule in ingress.body["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                service = k8s_one("Service", path["backend"]["service"]["name"])
                backends = pods_selected({"matchLabels": service["spec"]["selector"]})
                assert backends and all(is_ragserve(w) for w in backends), path["path"]


def test_ragserve_label_marks_only_ragserve_pods() -> None:
    """NetworkPolicies admit pods by this label; a runner or Qdrant pod carrying it would be let in too."""
    labelled = pods_selected({"matchLabels": RAGSERVE})
    assert labelled and {w.name for w in labelled} == {w.name for w in workloads() if is_ragserve(w)}


def _policies_for(labels: dict[str, str]) -> list[dict[str, Any]]:
    return [p.body["spec"] for p in k8s("NetworkPolicy") if selects(p.body["spec"]["podSelector"], labels)]


def _peers_admitted(labels: dict[str, str]) -> list[dict[str, Any]]:
    policies = [p for p in _policies_for(labels) if "Ingress" in p.get("policyTypes", ["Ingress"])]
    assert policies, f"no NetworkPolicy isolates pods labelled {labels}"
    peers = []
    for policy in policies:
        for rule in policy.get("ingress", []):
            assert rule.get("from"), f"an ingress rule without `from` admits everyone to {labels}"
            peers += rule["from"]
    return peers


def test_namespace_denies_ingress_by_default() -> None:
    assert any(p.body["spec"]["podSelector"] == {} and p.body["spec"]["policyTypes"] == ["Ingress"]
               and not p.body["spec"].get("ingress") for p in k8s("NetworkPolicy"))


@pytest.mark.parametrize("kind", ["runner", "qdrant"])
def test_only_ragserve_pods_reach_runners_and_qdrant(kind: str) -> None:
    targets = [w for w in workloads() if (is_runner(w) if kind == "runner" else is_qdrant(w))]
    assert targets
    for target in targets:
        for peer in _peers_admitted(pod_labels(target.body)):
            assert set(peer) == {"podSelector"}, f"{target.name}: only pods of this namespace, by label"
            admitted = pods_selected(peer["podSelector"])
            allowed = [w for w in admitted if is_ragserve(w) or (kind == "qdrant" and is_qdrant(w))]
            assert admitted and admitted == allowed, f"{target.name} admits {[w.name for w in admitted]}"


def _runner_serving(model: str) -> K8sObject:
    [runner] = [w for w in workloads() if is_runner(w) and flag_value(
        container_argv(pod_spec(w.body)["containers"][0]), "--served-model-name") == model]
    return runner


@pytest.mark.parametrize("setting", sorted(RUNNER_URL_SETTINGS))
def test_each_runner_is_private(setting: str) -> None:
    """Per model, so that a runner the generic checks do not recognise cannot pass them vacuously: reached
    only through ClusterIP Services, admitted only from ragserve pods, on the port it serves."""
    runner = _runner_serving(RUNNER_URL_SETTINGS[setting])
    labels = pod_labels(runner.body)
    services = [s for s in k8s("Service") if selects({"matchLabels": s.body["spec"]["selector"]}, labels)]
    assert services, runner.name
    for service in services:
        spec = service.body["spec"]
        assert spec.get("type", "ClusterIP") == "ClusterIP" and not spec.get("externalIPs"), service.name
        assert all("nodePort" not in p for p in spec["ports"]), service.name
    for peer in _peers_admitted(labels):
        assert set(peer) == {"podSelector"}, runner.name
        admitted = pods_selected(peer["podSelector"])
        assert admitted and all(is_ragserve(w) for w in admitted), f"{runner.name} admits {admitted}"
    port = int(flag_value(container_argv(pod_spec(runner.body)["containers"][0]), "--port"))
    opened = {p["port"] for spec in _policies_for(labels) for rule in spec.get("ingress", [])
              for p in rule.get("ports", [])}
    assert port in opened, runner.name


def test_runner_ports_are_the_ones_the_policy_opens() -> None:
    for runner in (w for w in workloads() if is_runner(w)):
        port = int(flag_value(container_argv(pod_spec(runner.body)["containers"][0]), "--port"))
        rules = [rule for spec in _policies_for(pod_labels(runner.body)) for rule in spec.get("ingress", [])]
        opened = {p["port"] for rule in rules for p in rule.get("ports", [])}
        assert port in opened, runner.name


# ----------------------------------------------------------------------------------- wiring and probes


@pytest.mark.parametrize("setting", [*sorted(RUNNER_URL_SETTINGS), "RAGSERVE_QDRANT__URL"])
def test_urls_in_the_config_reach_the_right_pods(setting: str) -> None:
    url = urlparse(config_env()[setting])
    service = k8s_one("Service", url.hostname or "")
    [port] = [p for p in service["spec"]["ports"] if p["port"] == url.port]
    [target] = pods_selected({"matchLabels": service["spec"]["selector"]})
    listening = container_port(target.body, port.get("targetPort", port["port"]))
    if setting.startswith("RAGSERVE_RUNNERS"):
        argv = container_argv(pod_spec(target.body)["containers"][0])
        assert listening == int(flag_value(argv, "--port"))
        assert flag_value(argv, "--served-model-name") == RUNNER_URL_SETTINGS[setting]
    else:
        assert is_qdrant(target) and listening == 6333


def test_ragserve_probes() -> None:
    """Readiness asks what each pod serves: the read path only search (a generation or reranker outage must
    not take it out of its Service), the pod with the worker also indexing; every capability named is one
    that /ready knows (service/api/readiness.py)."""
    for workload in (w for w in workloads() if is_ragserve(w) and not is_worker(w)):
        [container] = pod_spec(workload.body)["containers"]
        command = container["readinessProbe"]["exec"]["command"]
        assert "/opt/ragserve/probe.py" in command
        probe = urlparse(command[-1])
        assert probe.path == "/ready", workload.name
        required = parse_qs(probe.query).get("require", [",".join(DEFAULT_REQUIRED)])[0].split(",")
        assert set(required) <= set(CAPABILITIES), workload.name
        worker = "--with-worker" in container_argv(container)
        assert required == (["search", "indexing"] if worker else ["search"]), workload.name
        liveness = container["livenessProbe"]["httpGet"]
        assert liveness["path"] == "/health"
        assert container_port(workload.body, liveness["port"]) == int(config_env()["RAGSERVE_PORT"])


def test_workers_have_no_http_to_probe_or_route_to() -> None:
    """``ragserve worker`` opens no port: an HTTP probe would restart it forever, a Service would route nowhere."""
    workers = [w for w in workloads() if is_worker(w)]
    assert workers
    for worker in workers:
        [container] = pod_spec(worker.body)["containers"]
        assert not {"readinessProbe", "livenessProbe", "startupProbe", "ports"} & set(container), worker.name
        assert not [s.name for s in k8s("Service") if selects({"matchLabels": s.body["spec"]["selector"]}, pod_labels(worker.body))]


def test_runner_probes_ask_health_on_the_served_port() -> None:
    for runner in (w for w in workloads() if is_runner(w)):
        [container] = pod_spec(runner.body)["containers"]
        port = int(flag_value(container_argv(container), "--port"))
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            get = container[probe]["httpGet"]
            assert get["path"] == "/health", (runner.name, probe)
            assert container_port(runner.body, get["port"]) == port, (runner.name, probe)


def test_ragserve_env_comes_from_the_config_and_the_secret() -> None:
    secret = k8s_one("Secret", "ragserve-secrets")["stringData"]
    for name in [*config_env(), *secret]:
        if name.startswith("RAGSERVE_"):
            assert setting_path(name) is not None, name
    for workload in (w for w in workloads() if is_ragserve(w)):
        [container] = pod_spec(workload.body)["containers"]
        refs = [next(iter(ref.values()))["name"] for ref in container["envFrom"]]
        assert refs == ["ragserve-config", "ragserve-secrets"], workload.name
        for env in container.get("env", []):
            assert setting_path(env["name"]) is not None, env["name"]


# ------------------------------------------------------------------------------------------- scaling


def test_runner_gpus_match_their_parallelism() -> None:
    for runner in (w for w in workloads() if is_runner(w)):
        [container] = pod_spec(runner.body)["containers"]
        argv = container_argv(container)
        tp = int(flag_value(argv, "--tensor-parallel-size")) if "--tensor-parallel-size" in argv else 1
        dp = int(flag_value(argv, "--data-parallel-size")) if "--data-parallel-size" in argv else 1
        assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == tp * dp, runner.name
        assert float(flag_value(argv, "--gpu-memory-utilization")) <= 0.95
        assert runner.body["kind"] == "Deployment" and runner.body["spec"]["replicas"] >= 1


def test_workers_scale_out_on_the_postgres_queue() -> None:
    """Jobs live in PostgreSQL, so the workers are one Deployment of several replicas, stateless (no volume
    claims), and no pod runs a worker beside its API (--with-worker is for the one-host SQLite queue)."""
    for workload in (w for w in workloads() if is_ragserve(w)):
        argv = container_argv(pod_spec(workload.body)["containers"][0])
        assert "--with-worker" not in argv, workload.name
        assert "volumeClaimTemplates" not in workload.body["spec"], workload.name
    [worker] = [w for w in workloads() if is_worker(w)]
    assert worker.kind == "Deployment" and worker.body["spec"]["replicas"] >= 2
    assert container_argv(pod_spec(worker.body)["containers"][0]) == ["worker"]
    [pdb] = [p for p in k8s("PodDisruptionBudget") if selects(p.body["spec"]["selector"], pod_labels(worker.body))]
    assert pdb.body["spec"]["maxUnavailable"] == 1
    for hpa in k8s("HorizontalPodAutoscaler"):
        assert hpa.body["spec"]["scaleTargetRef"]["name"] != worker.name


def test_api_and_workers_reach_one_postgres_queue() -> None:
    """The queue URL (with its password) is in the Secret every ragserve pod reads, and nowhere else."""
    secret = k8s_one("Secret", "ragserve-secrets")["stringData"]
    assert urlparse(secret["RAGSERVE_INDEXER__QUEUE_URL"]).scheme == "postgresql"
    assert "RAGSERVE_INDEXER__QUEUE_URL" not in config_env()
    from service.config import IndexerSettings

    assert IndexerSettings(queue_url=secret["RAGSERVE_INDEXER__QUEUE_URL"]).queue_url is not None
    for workload in (w for w in workloads() if is_ragserve(w)):
        [container] = pod_spec(workload.body)["containers"]
        assert {"secretRef": {"name": "ragserve-secrets"}} in container["envFrom"], workload.name
        assert "RAGSERVE_INDEXER__QUEUE_URL" not in {e["name"] for e in container.get("env", [])}


def test_api_replicas_share_one_query_log() -> None:
    """Feedback may reach another API replica than the search it rates: every replica keeps the search records in
    one PostgreSQL database, named in the Secret, never a SQLite file of its own."""
    secret = k8s_one("Secret", "ragserve-secrets")["stringData"]
    assert urlparse(secret["RAGSERVE_QUERY_LOG__URL"]).scheme == "postgresql"
    assert "RAGSERVE_QUERY_LOG__URL" not in config_env()
    from service.config import QueryLogSettings

    url = QueryLogSettings(url=secret["RAGSERVE_QUERY_LOG__URL"]).url
    assert url is not None and url.get_secret_value() == secret["RAGSERVE_QUERY_LOG__URL"]


def test_ingress_sends_every_route_to_the_api() -> None:
    """Any API replica accepts ingest (uploads go into the queue) and answers for any job."""
    [ingress] = k8s("Ingress")
    paths = [p for rule in ingress.body["spec"]["rules"] for p in rule["http"]["paths"]]
    assert [(p["path"], p["pathType"]) for p in paths] == [("/", "Prefix")]
    [api] = [w for w in workloads() if is_ragserve(w) and not is_worker(w)]
    service = paths[0]["backend"]["service"]["name"]
    assert selects({"matchLabels": k8s_one("Service", service)["spec"]["selector"]}, pod_labels(api.body))
    assert container_argv(pod_spec(api.body)["containers"][0]) == ["serve"]


def test_the_hpa_scales_the_stateless_api() -> None:
    [hpa] = k8s("HorizontalPodAutoscaler")
    target = k8s_one(hpa.body["spec"]["scaleTargetRef"]["kind"], hpa.body["spec"]["scaleTargetRef"]["name"])
    assert "replicas" not in target["spec"], "the HPA owns replicas; a fixed count is reset on every apply"
    assert "--with-worker" not in container_argv(pod_spec(target)["containers"][0])
    assert hpa.body["spec"]["minReplicas"] >= 2


# -------------------------------------------------------------------------------------------- qdrant


def test_qdrant_runs_as_a_replicated_cluster() -> None:
    qdrant = k8s_one("StatefulSet", "qdrant")
    [container] = pod_spec(qdrant)["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["QDRANT__CLUSTER__ENABLED"] == "true"
    assert qdrant["spec"]["replicas"] >= 3, "3 nodes: consensus survives losing one"
    assert int(env["QDRANT__STORAGE__COLLECTION__REPLICATION_FACTOR"]) >= 2
    p2p = int(env["QDRANT__CLUSTER__P2P__PORT"])
    assert container_port(qdrant, "p2p") == p2p
    headless = k8s_one("Service", qdrant["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    assert p2p in {p["port"] for p in headless["spec"]["ports"]}
    client = k8s_one("Service", urlparse(config_env()["RAGSERVE_QDRANT__URL"]).hostname or "")
    assert p2p not in {p["port"] for p in client["spec"]["ports"]}, "peers' port is not for clients"
    assert qdrant["spec"]["volumeClaimTemplates"]
    assert {"secretKeyRef": {"name": "ragserve-secrets", "key": "RAGSERVE_QDRANT__API_KEY"}} in [
        e.get("valueFrom") for e in container["env"] if e["name"] == "QDRANT__SERVICE__API_KEY"]
    probes = {container["readinessProbe"]["httpGet"]["path"], container["livenessProbe"]["httpGet"]["path"]}
    assert probes == {"/readyz", "/livez"}
    [pdb] = [p for p in k8s("PodDisruptionBudget") if selects(p.body["spec"]["selector"], pod_labels(qdrant))]
    assert pdb.body["spec"]["maxUnavailable"] == 1
