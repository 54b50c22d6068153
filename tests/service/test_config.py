from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.config import Settings


def test_env_prefix_nested_sections_and_comma_separated_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSERVE_PROFILE", "minilm")
    monkeypatch.setenv("RAGSERVE_API_KEYS", "first-key-0123456789, second-key-0123456789")
    monkeypatch.setenv("RAGSERVE_LIMITS__MAX_DOCUMENTS_PER_REQUEST", "7")
    monkeypatch.setenv("RAGSERVE_RUNNERS__EMBED_URL", "http://127.0.0.1:9999")
    monkeypatch.setenv("RAGSERVE_QDRANT__URL", "http://qdrant:6333")
    s = Settings()
    assert s.profile == "minilm"
    assert [k.get_secret_value() for k in s.api_keys] == ["first-key-0123456789", "second-key-0123456789"]
    assert s.limits.max_documents_per_request == 7
    assert s.runners.embed_url == "http://127.0.0.1:9999"
    assert s.qdrant.url == "http://qdrant:6333"
    assert "first-key" not in repr(s)  # secrets never print


@pytest.mark.parametrize("key", ["changeme", "secret", "short"])
def test_placeholder_or_short_keys_are_refused(key: str) -> None:
    with pytest.raises(ValidationError, match="API keys"):
        Settings(api_keys=[key])


def test_embedded_store_path_defaults_under_data_dir(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert Settings(data_dir=tmp_path).qdrant_path == tmp_path / "qdrant"


def test_unknown_profile_is_refused() -> None:
    with pytest.raises(ValidationError):
        Settings(profile="gpt")  # type: ignore[arg-type]


def test_ingest_lists_are_comma_separated_or_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSERVE_FETCH__ALLOWED_DOMAINS", "docs.example.com, .example.org")
    monkeypatch.setenv("RAGSERVE_INGEST__ALLOWED_ROOTS", '["/srv/docs", "/data"]')
    monkeypatch.setenv("RAGSERVE_FETCH__ALLOWED_NETWORKS", '["127.0.0.1/32"]')
    s = Settings()
    assert s.fetch.allowed_networks == ["127.0.0.1/32"]
    assert s.fetch.allowed_domains == ["docs.example.com", ".example.org"]
    assert [str(p) for p in s.ingest.allowed_roots] == ["/srv/docs", "/data"]
