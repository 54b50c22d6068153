"""The manifests against the published schemas: Kubernetes' OpenAPI (strict: unknown fields fail) and the
Compose specification. Both validators are optional (`pip install -e ".[deploy-check]"`); without them
these tests skip, and test_manifests / test_compose / test_kubernetes still run."""

from __future__ import annotations

import json

import pytest

from tests.deploy.manifests import compose, k8s_objects

# The oldest Kubernetes minor still commonly run, and the newest the validator knows.
OLDEST_KUBERNETES = "1.30.0"


def test_kubernetes_objects_match_the_api_schema() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for version in (OLDEST_KUBERNETES, kubernetes_validate.latest_version()):
        for obj in k8s_objects():
            try:
                kubernetes_validate.validate(obj.body, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{obj.file} {obj.kind}/{obj.name} on Kubernetes {version}: {exc.message}")


def test_compose_file_matches_the_compose_spec() -> None:
    """After merge keys and interpolation, as `docker compose config` resolves them."""
    compose_spec = pytest.importorskip("compose_spec")
    compose_spec.PyCompose.from_json(json.dumps(compose()))
