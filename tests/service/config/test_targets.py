"""Runner URL settings: one URL as before, lists in both forms, dns+ names; bad entries refused by name."""

from __future__ import annotations

import pytest

from service.config.targets import Target, canonical, parse_targets


def test_one_url_is_a_pool_of_one() -> None:
    assert parse_targets("http://127.0.0.1:8101/") == (Target("http", "127.0.0.1", 8101, False),)


@pytest.mark.parametrize("value", [
    "http://a:1, http://b:2",
    '["http://a:1", "http://b:2"]',
    ["http://a:1", "http://b:2"],
    "http://a:1,http://b:2,http://a:1",
])
def test_lists_comma_separated_or_json(value: object) -> None:
    assert [t.url for t in parse_targets(value)] == ["http://a:1", "http://b:2"]  # type: ignore[arg-type]


def test_dns_names_resolve_and_default_ports() -> None:
    pool, plain = parse_targets("dns+http://embedding-runner-pool:8101,https://gpu-7")
    assert pool == Target("http", "embedding-runner-pool", 8101, True)
    assert plain == Target("https", "gpu-7", 443, False)


def test_ipv6_replicas_are_bracketed() -> None:
    (target,) = parse_targets("http://[fd00::7]:8101")
    assert target.url == "http://[fd00::7]:8101"


@pytest.mark.parametrize(("value", "why"), [
    ("ftp://a:1", "scheme"), ("http://a:1/v1", "only scheme"), ("http://:80", "no host"), ("", "at least one"),
    ("[1, 2]", "list of strings"), ('["http://a:1"', "not valid JSON"), ("http://a:99999", "out of range"),
])
def test_bad_entries_are_refused(value: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_targets(value)


def test_canonical_form_is_comma_separated() -> None:
    assert canonical('["http://a:1", "dns+http://b:2"]') == "http://a:1,dns+http://b:2"


def test_a_refused_entry_never_echoes_credentials() -> None:
    with pytest.raises(ValueError) as refused:
        parse_targets("http://admin:hunter2@runner:8101")
    assert "hunter2" not in str(refused.value) and "***@runner:8101" in str(refused.value)
