from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.config import CLIENT_VARIABLES, NOT_SETTINGS, Settings, UnknownSetting, setting_names


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


@pytest.mark.parametrize("name, nearest", [
    ("RAGSERVE_PROFLE", "RAGSERVE_PROFILE"),
    ("RAGSERVE_QDRANT__URLL", "RAGSERVE_QDRANT__URL"),
    ("RAGSERVE_LIMITS__MAX_TOPK", "RAGSERVE_LIMITS__MAX_TOP_K"),
    ("RAGSERVE_ENGINE__EMBED__MAX_NUM_SEQ", "RAGSERVE_ENGINE__EMBED__MAX_NUM_SEQS"),
    ("ragserve_api_keyss", "RAGSERVE_API_KEYS"),
    ("RAGSERVE_APIKEY", "RAGSERVE_API_KEY"),  # the client's variable is a known name, pointed to as well
    ("RAGSERVE_OTEL_ENDPOINT", "RAGSERVE_OTEL__ENDPOINT"),
])
def test_an_unknown_variable_stops_start_up_naming_the_nearest_setting(
    monkeypatch: pytest.MonkeyPatch, name: str, nearest: str
) -> None:
    monkeypatch.setenv(name, "s3cr3t-value-never-printed")
    with pytest.raises(UnknownSetting) as info:
        Settings()
    assert f"{name} (did you mean {nearest}?)" in str(info.value)
    assert "s3cr3t" not in str(info.value)


def test_a_name_near_nothing_is_still_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSERVE_XYZZY_PLUGH", "1")
    with pytest.raises(UnknownSetting, match=r"environment: RAGSERVE_XYZZY_PLUGH\. Every"):
        Settings()


def test_script_and_test_session_variables_are_not_settings_and_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*NOT_SETTINGS, "RAGSERVE_TEST_RUNNER_URLS", "RAGSERVE_TEST_VL_URL"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("RAGSERVE_LIMITS", '{"max_top_k": 7}')  # a whole section as JSON is a setting too
    assert Settings().limits.max_top_k == 7


def test_the_clients_variables_pass_and_are_not_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """RAGSERVE_URL and RAGSERVE_API_KEY are the client's (service/client, the client commands): exported, they stop
    nothing, and the server's keys stay RAGSERVE_API_KEYS."""
    monkeypatch.delenv("RAGSERVE_API_KEYS", raising=False)
    monkeypatch.setenv("RAGSERVE_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("RAGSERVE_API_KEY", "client-key-0123456789")
    assert Settings().api_keys == []
    assert CLIENT_VARIABLES == {"RAGSERVE_URL", "RAGSERVE_API_KEY"}
    assert not CLIENT_VARIABLES & setting_names()


def test_every_setting_has_an_environment_name() -> None:
    names = setting_names()
    assert {"RAGSERVE_PROFILE", "RAGSERVE_QDRANT", "RAGSERVE_QDRANT__URL", "RAGSERVE_API_KEYS_FILE",
            "RAGSERVE_LOG_FORMAT", "RAGSERVE_OTEL__ENDPOINT", "RAGSERVE_ENGINE__GENERATE__TENSOR_PARALLEL_SIZE",
            "RAGSERVE_INDEXER__LEASE_S"} <= names
    assert len(names) == len({n.upper() for n in names})


def test_ragserve_serve_refuses_to_start_with_a_typo(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSERVE_")}
    env.update(RAGSERVE_DATA_DIR=str(tmp_path), RAGSERVE_INDEXR__LEASE_S="5")
    done = subprocess.run([sys.executable, "-m", "service.cli", "serve"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "ragserve: unknown setting(s) in the environment: RAGSERVE_INDEXR__LEASE_S (did you mean "
        "RAGSERVE_INDEXER__LEASE_S?). Every RAGSERVE_ variable must name a setting (service/config/).")
    assert not (tmp_path / "qdrant").exists()  # nothing was opened


def test_runner_urls_take_one_url_a_list_or_a_dns_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSERVE_RUNNERS__EMBED_URL", '["http://10.0.0.1:8101", "http://10.0.0.2:8101"]')
    monkeypatch.setenv("RAGSERVE_RUNNERS__RERANK_URL", "http://10.0.0.1:8102, http://10.0.0.2:8102")
    monkeypatch.setenv("RAGSERVE_RUNNERS__GENERATE_URL", "dns+http://generation-runner-pool:8104")
    runners = Settings().runners
    assert runners.embed_url == "http://10.0.0.1:8101,http://10.0.0.2:8101"
    assert runners.rerank_url == "http://10.0.0.1:8102,http://10.0.0.2:8102"
    assert runners.generate_url == "dns+http://generation-runner-pool:8104"


def test_a_bad_runner_url_is_refused_at_start_up() -> None:
    with pytest.raises(ValidationError, match="embed_url"):
        Settings(runners={"embed_url": "http://a:1,runner-b:8101/v1"})
