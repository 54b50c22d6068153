"""Loading deploy/'s compose file and Kubernetes manifests, and the small lookups the tests share.

Nothing here talks to Docker or a cluster: files are parsed with PyYAML (which resolves YAML merge keys the
way Compose does) and Compose's ``${VAR:-default}`` interpolation is applied with the defaults, as
``docker compose config`` would with an empty environment.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from service.config import Settings
from service.profiles import QWEN3
from service.runners.launcher import RunnerSpec

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
GPU_HOST = DEPLOY / "gpu-host"
COMPOSE_FILE = GPU_HOST / "compose.yaml"
KUBERNETES = DEPLOY / "kubernetes" / "base"
OVERLAYS = DEPLOY / "kubernetes" / "overlays"
TEMPLATE = ROOT / "service" / "runners" / "templates" / "qwen3_reranker.jinja"

# Flags whose values belong to the placement, not to the model: where the runner listens, how much of each
# GPU it takes, and how many copies run (data parallel is `--data-parallel-size` or replicas, as the
# deployment prefers). Everything else, the tensor and pipeline parallel sizes included (a model that does
# not fit one GPU needs them), must equal what the launcher builds from the deployment's settings.
PLACEMENT_FLAGS = frozenset({"--host", "--port", "--gpu-memory-utilization", "--data-parallel-size"})

# Flags whose value is JSON: compared parsed, so that spacing or key order in a manifest does not matter.
JSON_FLAGS = frozenset({"--hf-overrides", "--limit-mm-per-prompt", "--speculative-config"})

# Runner environment that belongs to the deployment, not to the launcher: where the weights are cached,
# offline mode, telemetry off. Every other variable a runner gets must be exactly the launcher's.
DEPLOYMENT_ENV = frozenset({"HF_HOME", "HF_HUB_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK",
                            "CUDA_VISIBLE_DEVICES"})  # the orchestrator assigns devices

# ragserve's URL setting for each runner, and the model the runner behind it must serve (qwen3 profile).
assert QWEN3.reranker is not None and QWEN3.generator is not None
RUNNER_URL_SETTINGS = {
    "RAGSERVE_RUNNERS__EMBED_URL": QWEN3.embedding.name,
    "RAGSERVE_RUNNERS__RERANK_URL": QWEN3.reranker.name,
    "RAGSERVE_RUNNERS__GENERATE_URL": QWEN3.generator.name,
}
POOLING_MODELS = frozenset({QWEN3.embedding.name, QWEN3.reranker.name})
GENERATOR_MODEL = QWEN3.generator.name

_DEFAULT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?-([^}]*)\}")
_REQUIRED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?\?[^}]*\}")
_PLAIN = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


# ---------------------------------------------------------------------------------------------- compose


def interpolate(value: Any, required: str = "<required>") -> Any:
    """Compose interpolation with an empty environment: defaults apply, required variables become
    ``required``, ``$$`` is a literal ``$``."""
    if isinstance(value, dict):
        return {k: interpolate(v, required) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, required) for v in value]
    if isinstance(value, str):
        text = value.replace("$$", "\0")
        text = _DEFAULT.sub(lambda m: m.group(2), text)
        text = _REQUIRED.sub(required, text)
        return text.replace("\0", "$")
    return value


@cache
def compose_raw() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return data


@cache
def compose() -> dict[str, Any]:
    """The compose file as Compose sees it: merge keys resolved, defaults interpolated, x- keys dropped."""
    raw = {k: v for k, v in compose_raw().items() if not k.startswith("x-")}
    resolved: dict[str, Any] = interpolate(raw)
    return resolved


def compose_argv(service: dict[str, Any]) -> list[str]:
    entrypoint = service.get("entrypoint") or []
    command = service.get("command") or []
    return [str(a) for a in [*entrypoint, *command]]


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


# ------------------------------------------------------------------------------------------- kubernetes


@dataclass(frozen=True)
class K8sObject:
    file: str
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


@cache
def kustomization() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    return data


@cache
def k8s_objects() -> tuple[K8sObject, ...]:
    objects = []
    for name in kustomization()["resources"]:
        for body in yaml.safe_load_all((KUBERNETES / name).read_text()):
            if body is not None:
                objects.append(K8sObject(name, body))
    return tuple(objects)


def k8s(kind: str, name: str | None = None) -> list[K8sObject]:
    return [o for o in k8s_objects() if o.kind == kind and (name is None or o.name == name)]


def k8s_one(kind: str, name: str) -> dict[str, Any]:
    found = k8s(kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0].body


WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")


def workloads() -> list[K8sObject]:
    return [o for o in k8s_objects() if o.kind in WORKLOAD_KINDS]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def pod_labels(workload: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels only; the manifests use nothing else) against a pod's labels."""
    assert set(selector) <= {"matchLabels"}, f"unsupported selector {selector}"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def container_argv(container: dict[str, Any]) -> list[str]:
    return [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's literal ``env`` entries (``valueFrom`` ones are left out)."""
    return {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}


def config_env() -> dict[str, str]:
    """What ragserve pods get from the ConfigMap (envFrom)."""
    data: dict[str, str] = k8s_one("ConfigMap", "ragserve-config")["data"]
    return {k: str(v) for k, v in data.items()}


# ---------------------------------------------------------------------------------------- runner argv


def flag_value(argv: list[str], flag: str) -> str:
    index = argv.index(flag)
    return argv[index + 1]


def launcher_argv(spec: RunnerSpec) -> list[str]:
    """The launcher's command line, with the interpreter as the vLLM image names it."""
    argv = spec.command()
    assert argv[0] == sys.executable
    return ["python3", *argv[1:]]


def model_flags(argv: list[str]) -> list[str]:
    """``argv`` without the placement flags and ``--chat-template`` (whose path depends on the mount), and
    with the JSON flags' values in canonical JSON, so that two command lines for the same model compare equal."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg in PLACEMENT_FLAGS or arg == "--chat-template":
            skip = True
            continue
        if i > 0 and argv[i - 1] in JSON_FLAGS:
            arg = json.dumps(json.loads(arg), sort_keys=True)
        out.append(arg)
    return out


def launcher_env(env: dict[str, str]) -> dict[str, str]:
    """A runner's environment without :data:`DEPLOYMENT_ENV`: what must equal the launcher's ``spec.env``."""
    return {k: v for k, v in env.items() if k not in DEPLOYMENT_ENV}


# ------------------------------------------------------------------------------------------- settings


def setting_path(env_name: str) -> list[str] | None:
    """``RAGSERVE_QDRANT__URL`` -> ``["qdrant", "url"]`` when that is a field (or section) of Settings,
    else None. Case-insensitive, as pydantic-settings reads the environment."""
    if not env_name.upper().startswith("RAGSERVE_"):
        return None
    parts = env_name[len("RAGSERVE_"):].lower().split("__")
    model: type[BaseModel] | None = Settings
    for part in parts:
        if model is None or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return parts


def service_link_vars(service_name: str, ports: list[dict[str, Any]]) -> Iterator[str]:
    """The variables Kubernetes injects for a Service into pods with service links enabled."""
    prefix = service_name.upper().replace("-", "_")
    yield f"{prefix}_SERVICE_HOST"
    yield f"{prefix}_SERVICE_PORT"
    yield f"{prefix}_PORT"
    for port in ports:
        proto = str(port.get("protocol", "TCP")).upper()
        base = f"{prefix}_PORT_{port['port']}_{proto}"
        yield from (base, f"{base}_PROTO", f"{base}_PORT", f"{base}_ADDR")
        if port.get("name"):
            yield f"{prefix}_SERVICE_PORT_{str(port['name']).upper().replace('-', '_')}"


# --------------------------------------------------------------------------------------------- overlays


def kustomize_command() -> list[str] | None:
    """The kustomize that renders overlays: $RAGSERVE_KUSTOMIZE (a command line, e.g. "kustomize build"),
    else a `kustomize` binary, else `kubectl kustomize` (kustomize v5 is built into kubectl 1.27+)."""
    if os.environ.get("RAGSERVE_KUSTOMIZE"):
        return shlex.split(os.environ["RAGSERVE_KUSTOMIZE"])
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


@cache
def render(folder: Path) -> tuple[K8sObject, ...]:
    """``kubectl kustomize FOLDER``, parsed: the objects exactly as `kubectl apply -k` would send them."""
    command = kustomize_command()
    assert command is not None, "no kustomize: install kubectl (1.27+) or kustomize, or set RAGSERVE_KUSTOMIZE"
    done = subprocess.run([*command, str(folder)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(command)} {folder}: {done.stderr}"
    return tuple(K8sObject(str(folder.relative_to(DEPLOY)), body)
                 for body in yaml.safe_load_all(done.stdout) if body is not None)


def pod_containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """A pod's long-running containers: its containers and its native sidecars (init containers with
    restartPolicy Always), in start order."""
    spec = pod_spec(workload)
    sidecars = [c for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    return [*sidecars, *spec["containers"]]
