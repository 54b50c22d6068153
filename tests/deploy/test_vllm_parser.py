"""Every runner command line deploy/ ships, parsed by the installed vLLM's own `serve` parser (the pinned
version: test_manifests checks the image tag against it). One child process for all of them (~20 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.deploy.manifests import (
    OVERLAYS,
    ROOT,
    compose,
    compose_argv,
    container_argv,
    k8s_objects,
    kustomize_command,
    pod_containers,
    render,
)

pytestmark = pytest.mark.timeout(600)  # as long as the parser subprocess may take

pytest.importorskip("vllm")


def _deployed() -> dict[str, list[str]]:
    argvs = {f"compose/{name}": compose_argv(s) for name, s in compose()["services"].items()
             if "--served-model-name" in compose_argv(s)}
    objects = [("base", o) for o in k8s_objects()]
    if kustomize_command() is not None:
        objects += [(folder.name, o) for folder in sorted(OVERLAYS.iterdir()) for o in render(folder)]
    for where, obj in objects:
        if obj.kind in ("Deployment", "StatefulSet"):
            for container in pod_containers(obj.body):
                if "--served-model-name" in (argv := container_argv(container)):
                    argvs[f"{where}/{obj.name}/{container['name']}"] = argv
    # Compose gives the arguments after its entrypoint; Kubernetes after `python3 -m <module>`.
    return {k: argv[3:] if argv[:2] == ["python3", "-m"] else argv for k, argv in argvs.items()}


def test_every_deployed_runner_command_line_parses() -> None:
    argvs = _deployed()
    assert len(argvs) >= 3 + 3 + 3 * 3, sorted(argvs)  # compose, base, three overlays
    done = subprocess.run([sys.executable, "-m", "service.runners.vllm_args"], input=json.dumps(argvs),
                          capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer.get("refused") == {}, answer
