"""Shared pieces of the settings: the environment's prefix, the names it may hold besides settings, and how
lists are read."""

from __future__ import annotations

import json

from pydantic import SecretStr

ENV_PREFIX = "RAGSERVE_"


NOT_SETTINGS = frozenset({"RAGSERVE_VLLM", "RAGSERVE_KUSTOMIZE", "RAGSERVE_SETUP_LOG"})
"""``RAGSERVE_`` names read by scripts, not by Settings: deploy/local/setup.sh's vLLM build, tests/deploy's
kustomize command, the install scripts' log file (deploy/local/quietly.sh)."""


CLIENT_VARIABLES = frozenset({"RAGSERVE_URL", "RAGSERVE_API_KEY"})
"""What the Python client, its adapters and the client commands (``ragserve index``, ``search``...) read: where
the API is and the key to send it. Not server settings (the server's keys are ``RAGSERVE_API_KEYS``), but known
names: exporting them never stops a command, and a name near one of them is pointed to it."""


NOT_SETTINGS_PREFIXES = ("RAGSERVE_TEST_",)
"""The test session's developer shortcuts (tests/conftest.py)."""


PLACEHOLDER_KEYS = {"changeme", "change-me", "secret", "test", "password", ""}


def _comma_list(value: object) -> object:
    """Lists in the environment are comma-separated (a JSON list is accepted too)."""
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            return json.loads(value)
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


RUNNER_URL_HELP = (
    " One URL, several (comma-separated or a JSON list: a pool of replicas), or dns+http://NAME:PORT for every "
    "address NAME resolves to, re-resolved every RAGSERVE_UPSTREAM__DNS_REFRESH_S (a headless Service)."
)


def postgres_url(url: SecretStr | None, setting: str) -> SecretStr | None:
    """``url`` when it is a PostgreSQL URL (or None); the refusal names ``setting``, never the URL (it holds a
    password)."""
    if url is not None and not url.get_secret_value().startswith(("postgresql://", "postgres://")):
        raise ValueError(f"{setting} must be a postgresql:// URL")
    return url
