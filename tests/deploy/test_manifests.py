"""What every deployment in deploy/ must agree on with the code: the runner command lines the launcher
builds, the reranker template, the settings names, the image pins, the image itself."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.config import NOT_SETTINGS, Settings  # NOT_SETTINGS: names scripts read, which Settings lets through
from service.profiles import QWEN3
from service.runners.launcher import MEDIA_DOMAIN_NOBODY, RunnerSpec, runner_specs
from tests.deploy.manifests import (
    COMPOSE_FILE,
    DEPLOY,
    GENERATOR_MODEL,
    GPU_HOST,
    POOLING_MODELS,
    ROOT,
    TEMPLATE,
    compose,
    compose_argv,
    compose_env,
    compose_raw,
    config_env,
    container_argv,
    container_env,
    flag_value,
    k8s,
    k8s_objects,
    k8s_one,
    launcher_argv,
    launcher_env,
    model_flags,
    pod_spec,
    setting_path,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings() reads the environment: keep the developer's RAGSERVE_* out of these comparisons."""
    for name in list(os.environ):
        if name.upper().startswith("RAGSERVE_"):
            monkeypatch.delenv(name)


def launcher_specs(where: str | None = None) -> dict[str, RunnerSpec]:
    """What `ragserve runners up` starts on a GPU host, by served model name: with the deployment's own
    settings (engine arguments included), or the qwen3 defaults."""
    settings = _settings_from(ragserve_env(where)) if where else Settings(profile="qwen3")
    return {s.served_name: s for s in runner_specs(settings, cpu=False)}


def compose_runners() -> dict[str, list[str]]:
    return {served: argv for served, (argv, _) in _compose_runners().items()}


def k8s_runners() -> dict[str, list[str]]:
    return {served: argv for served, (argv, _) in _k8s_runners().items()}


def deployed_runners(where: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Served model name -> (command line, environment) of each runner the deployment starts."""
    return _compose_runners() if where == "compose" else _k8s_runners()


def _compose_runners() -> dict[str, tuple[list[str], dict[str, str]]]:
    return {flag_value(argv, "--served-model-name"): (argv, compose_env(s))
            for s in compose()["services"].values()
            if "--served-model-name" in (argv := compose_argv(s))}


def _k8s_runners() -> dict[str, tuple[list[str], dict[str, str]]]:
    out = {}
    for workload in k8s("Deployment") + k8s("StatefulSet"):
        for container in pod_spec(workload.body)["containers"]:
            argv = container_argv(container)
            if "--served-model-name" in argv:
                out[flag_value(argv, "--served-model-name")] = (argv, container_env(container))
    return out


def ragserve_env(where: str) -> dict[str, str]:
    """The settings ragserve itself runs with in that deployment (keys left out)."""
    env = compose_env(compose()["services"]["ragserve"]) if where == "compose" else config_env()
    return {k: v for k, v in env.items() if k.startswith("RAGSERVE_") and "KEY" not in k}


# ------------------------------------------------------------------------------------ runner command lines


def test_the_profile_has_two_pooling_runners_and_a_generator() -> None:
    """What the assertions below assume about the launcher; if this fails, they need revisiting."""
    assert set(launcher_specs()) == {*POOLING_MODELS, GENERATOR_MODEL}


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_runner_command_lines_are_the_launchers(where: str) -> None:
    deployed = deployed_runners(where)
    expected = launcher_specs(where)
    assert set(deployed) == set(expected), "one runner per model of the profile, no more"
    for served, spec in expected.items():
        argv, env = deployed[served]
        assert model_flags(argv) == model_flags(launcher_argv(spec)), served
        assert launcher_env(env) == spec.env, f"{served}: the runner's environment is the launcher's"
        assert flag_value(argv, "--model") == spec.checkpoint
        assert flag_value(argv, "--host") == "0.0.0.0", "runners listen on their container/pod address"
        if served in POOLING_MODELS:
            assert flag_value(argv, "--runner") == "pooling", served
        else:
            assert served == GENERATOR_MODEL


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_generation_runner_fetches_nothing_and_loads_no_lora_at_run_time(where: str) -> None:
    """The launcher's safety flags, spelled out (the comparison above would also catch their loss, but this
    says what is at stake): vLLM must fetch no URL itself and take no adapter path from a caller."""
    argv, env = deployed_runners(where)[GENERATOR_MODEL]
    assert "--runner" not in argv, "a chat server, not a pooling runner"
    assert flag_value(argv, "--allowed-media-domains") == MEDIA_DOMAIN_NOBODY
    assert MEDIA_DOMAIN_NOBODY.endswith(".invalid"), "a name that never resolves (RFC 2606)"
    assert "--allowed-local-media-path" not in argv, "file:// URLs stay refused"
    assert env["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] == "0"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "0"
    assert "--api-key" not in argv and "VLLM_API_KEY" not in env, "privacy comes from the network, not a key"


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_generator_size_hint_is_ragserves_image_limit(where: str) -> None:
    """ragserve downsizes every image to MAX_IMAGE_SIDE before the runner sees it, and the runner's profiler
    sizes its memory for the hint: the two must be the same numbers (deploy/generation.md, "Memory")."""
    media = _settings_from(ragserve_env(where)).media
    argv, _ = deployed_runners(where)[GENERATOR_MODEL]
    hint = json.loads(flag_value(argv, "--limit-mm-per-prompt"))
    assert hint == {"image": {"count": media.max_images_per_request, "width": media.max_image_side,
                              "height": media.max_image_side}, "video": 0}


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_reranker_gets_the_shipped_template(where: str) -> None:
    rerank = launcher_specs()[QWEN3.reranker.name]  # type: ignore[union-attr]
    assert Path(flag_value(rerank.args, "--chat-template")).resolve() == TEMPLATE.resolve()
    path = flag_value((compose_runners() if where == "compose" else k8s_runners())[rerank.served_name],
                      "--chat-template")
    if where == "compose":
        service = next(s for s in compose()["services"].values()
                       if "--served-model-name" in (argv := compose_argv(s))
                       and flag_value(argv, "--served-model-name") == rerank.served_name)
        mounts = [v.split(":") for v in service["volumes"]]
        sources = [(GPU_HOST / src).resolve() for src, target, *_ in mounts if target == path]
        assert sources == [TEMPLATE.resolve()]
        assert [m for m in mounts if m[1] == path][0][2:] == ["ro"]
    else:
        deployment = next(d.body for d in k8s("Deployment")
                          if rerank.served_name in container_argv(pod_spec(d.body)["containers"][0]))
        spec = pod_spec(deployment)
        mounts = spec["containers"][0]["volumeMounts"]
        mount = next(m for m in mounts if path.startswith(m["mountPath"] + "/"))
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        configmap = k8s_one("ConfigMap", volume["configMap"]["name"])
        assert Path(path).name in configmap["data"]


def test_template_configmap_is_byte_identical() -> None:
    data = k8s_one("ConfigMap", "reranker-template")["data"]
    assert data["qwen3_reranker.jinja"] == TEMPLATE.read_text(), (
        "deploy/kubernetes/base/reranker-template.yaml drifted from service/runners/templates/"
        "qwen3_reranker.jinja: copy the file in again, indented, under `qwen3_reranker.jinja: |+`"
    )


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_runner_urls_match_runner_ports(where: str) -> None:
    """ragserve's settings (built from the deployment's own env) point at the ports the runners listen on,
    and the launcher built from those settings gives each runner the model flags it got (context length,
    the generator's image limits): ragserve and its runners agree on what they may send each other."""
    settings = _settings_from(ragserve_env(where))
    deployed = deployed_runners(where)
    specs = runner_specs(settings, cpu=False)
    assert {s.served_name for s in specs} == set(deployed), "ragserve calls every runner, and only those"
    for spec in specs:
        argv, _ = deployed[spec.served_name]
        assert flag_value(argv, "--port") == str(spec.port), spec.name
        assert model_flags(argv) == model_flags(launcher_argv(spec)), spec.name


def _settings_from(env: dict[str, str]) -> Settings:
    mp = pytest.MonkeyPatch()
    try:
        for k, v in env.items():
            mp.setenv(k, v)
        return Settings()
    finally:
        mp.undo()


# ------------------------------------------------------------------------------------------- settings


def _deploy_text_files() -> list[Path]:
    return [p for p in DEPLOY.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def test_every_ragserve_name_in_deploy_is_a_setting() -> None:
    seen: dict[str, Path] = {}
    for path in _deploy_text_files():
        for name in re.findall(r"\bRAGSERVE_[A-Z0-9_]*[A-Z0-9]", path.read_text()):
            seen.setdefault(name, path)
    assert "RAGSERVE_QDRANT__URL" in seen  # the scan sees the files
    unknown = {n: str(p.relative_to(ROOT)) for n, p in seen.items()
               if n not in NOT_SETTINGS and setting_path(n) is None}
    assert not unknown, f"not fields of service.config.Settings: {unknown}"


def test_settings_accept_the_deployments_values() -> None:
    """Lists are JSON in the environment: a comma-separated allowlist would only fail at start-up."""
    for env in (compose_env(compose()["services"]["ragserve"]), config_env()):
        ours = {k: v for k, v in env.items() if k.startswith("RAGSERVE_") and "KEY" not in k}
        settings = _settings_from(ours)
        assert settings.environment == "production"
        assert settings.profile == "qwen3"
        assert settings.qdrant.url, "production uses a Qdrant server, never the embedded store"


def _shipped_placeholders() -> dict[str, str]:
    [env_example] = re.findall(r"^RAGSERVE_API_KEYS=(.*)$", (GPU_HOST / "env.example").read_text(), re.M)
    secret = k8s_one("Secret", "ragserve-secrets")["stringData"]
    return {"kubernetes/secret.yaml": secret["RAGSERVE_API_KEYS"], "gpu-host/env.example": env_example}


@pytest.mark.parametrize("source", ["kubernetes/secret.yaml", "gpu-host/env.example"])
def test_shipped_key_placeholders_are_refused(source: str) -> None:
    """What ships in place of keys fails closed: the API will not start until someone generates real ones."""
    with pytest.raises(ValidationError, match="placeholder"):
        Settings(api_keys=_shipped_placeholders()[source])


def test_no_literal_keys_in_compose() -> None:
    for name, service in compose_raw()["services"].items():
        for key, value in compose_env(service).items():
            if "API_KEY" in key:
                assert re.fullmatch(r"\$\{[A-Z_]+:\?[^}]+\}", value), f"{name}.{key} must come from .env"
    assert ".env" in (GPU_HOST / ".gitignore").read_text().split()


# --------------------------------------------------------------------------------------------- images


def _pins() -> dict[str, str]:
    (vllm,) = re.findall(r'^gpu = \["vllm==([^"]+)"\]', (ROOT / "pyproject.toml").read_text(), re.M)
    return {"vllm": vllm}


def _images() -> list[tuple[str, str]]:
    where = str(COMPOSE_FILE.relative_to(ROOT))
    images = [(where, s["image"]) for s in compose()["services"].values() if "image" in s]
    for workload in k8s_objects():
        if workload.kind in ("Deployment", "StatefulSet"):
            images += [(workload.file, c["image"]) for c in pod_spec(workload.body)["containers"]]
    return images


def test_vllm_image_matches_the_pinned_vllm() -> None:
    vllm = [(where, image) for where, image in _images() if image.startswith("vllm/")]
    assert len({w for w, _ in vllm}) >= 4  # compose + the three runner manifests
    assert {image for _, image in vllm} == {f"vllm/vllm-openai:v{_pins()['vllm']}"}


def test_one_qdrant_version_everywhere() -> None:
    tags = {image.split(":")[1].removesuffix("-unprivileged")
            for _, image in _images() if image.startswith("qdrant/")}
    assert len(tags) == 1, tags


# ---------------------------------------------------------------------------------------------- image


def _dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


def test_dockerfile_runs_ragserve_as_non_root() -> None:
    text = _dockerfile()
    final_stage = text[text.rindex("\nFROM "):]
    assert re.search(r'^ENTRYPOINT \["ragserve"\]$', final_stage, re.M)
    assert re.search(r'^CMD \["serve"\]$', final_stage, re.M)
    user = re.findall(r"^USER (\S+)$", final_stage, re.M)
    assert user and user[-1].split(":")[0] not in {"0", "root"}
    assert re.search(r'HEALTHCHECK .*\n?.*probe\.py", "/health"', final_stage)
    assert 'pip install ".[eval,mcp]"' in text, "the API image installs ragserve without the vLLM extras"


def test_image_tokenizer_is_the_embedding_models() -> None:
    """The manifests point RAGSERVE_INDEXER__TOKENIZER_PATH at the folder the image build fills, and that
    folder holds the tokenizer of the model the embedding runner serves."""
    text = _dockerfile()
    repo = re.search(r"^ARG TOKENIZER_REPO=(\S+)$", text, re.M).group(1)  # type: ignore[union-attr]
    assert repo == QWEN3.embedding.name
    folder = f"/opt/ragserve/tokenizers/{repo.rsplit('/', 1)[1]}"
    assert compose_env(compose()["services"]["ragserve"])["RAGSERVE_INDEXER__TOKENIZER_PATH"] == folder
    assert config_env()["RAGSERVE_INDEXER__TOKENIZER_PATH"] == folder


def test_build_context_admits_what_the_dockerfile_copies() -> None:
    allowed = [line[1:].rstrip("/") for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
               if line.startswith("!")]
    for sources in re.findall(r"^COPY (?!--from)(.+) \S+$", _dockerfile(), re.M):
        for source in sources.split():
            assert any(source.rstrip("/") == a or source.startswith(a + "/") for a in allowed), source
            assert (ROOT / source).exists(), source
