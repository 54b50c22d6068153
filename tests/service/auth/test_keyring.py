from __future__ import annotations

import pytest
from pydantic import SecretStr

from service.auth.keyring import KeyConfigError, KeyRing, keyring_from_settings
from service.auth.keys import scrypt_hash, sha256_hex
from service.auth.principal import SCOPES
from service.config import Settings
from service.config.keys import ApiKeyEntry
from service.store.tenancy import Tenant

READER = "reader-key-0123456789abcdef"
WRITER = "writer-key-0123456789abcdef"
PERSON = "a passphrase a person chose"


def ring() -> KeyRing:
    return KeyRing.build(["plain-key-0123456789abcdef"], [
        ApiKeyEntry(id="reader", sha256=sha256_hex(READER), scopes=["read"], collections=["kb"]),
        ApiKeyEntry(sha256=sha256_hex(WRITER), scopes=["write"], tenant={"field": "org", "value": "acme"}),
        ApiKeyEntry(id="person", scrypt=scrypt_hash(PERSON, log2_n=10), scopes=["read", "admin"]),
    ])


async def test_each_key_is_its_own_principal() -> None:
    keys = ring()
    plain = await keys.authenticate("plain-key-0123456789abcdef")
    assert plain is not None and (plain.id, plain.scopes, plain.collections, plain.tenant) == (
        "env-1", frozenset(SCOPES), None, None)
    reader = await keys.authenticate(READER)
    assert reader is not None and (reader.id, reader.scopes, reader.collections) == (
        "reader", frozenset({"read"}), frozenset({"kb"}))
    writer = await keys.authenticate(WRITER)
    assert writer is not None and writer.tenant == Tenant("org", "acme")
    assert writer.id == f"key-{sha256_hex(WRITER)[:12]}"  # from the hash, never the key
    person = await keys.authenticate(PERSON)
    assert person is not None and person.id == "person" and person.scopes == frozenset({"read", "admin"})


@pytest.mark.parametrize("offered", ["", READER[:-1], READER + " ", READER.upper(), "x" * 10_000, PERSON[:-1]])
async def test_anything_else_is_no_one(offered: str) -> None:
    assert await ring().authenticate(offered) is None


async def test_a_verified_scrypt_key_is_derived_once() -> None:
    keys = ring()
    calls: list[str] = []
    original = keys._try_scrypt

    def counting(offered: str):  # type: ignore[no-untyped-def]
        calls.append(offered)
        return original(offered)

    keys._try_scrypt = counting  # type: ignore[method-assign]
    for _ in range(3):
        assert (await keys.authenticate(PERSON)) is not None
    assert await keys.authenticate(READER) is not None  # a SHA-256 match never derives
    assert calls == [PERSON]


def test_duplicate_ids_or_keys_are_refused() -> None:
    with pytest.raises(KeyConfigError, match="ids must be unique"):
        KeyRing.build([], [ApiKeyEntry(id="a", sha256=sha256_hex(READER), scopes=["read"]),
                           ApiKeyEntry(id="a", sha256=sha256_hex(WRITER), scopes=["read"])])
    with pytest.raises(KeyConfigError, match="configured twice"):
        KeyRing.build([READER], [ApiKeyEntry(sha256=sha256_hex(READER), scopes=["read"])])


async def test_settings_merge_plain_keys_hashes_and_the_file(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "keys.json"
    path.write_text(f'[{{"id": "from-file", "sha256": "{sha256_hex(WRITER)}", "scopes": ["write"]}}]')
    monkeypatch.setenv("RAGSERVE_API_KEYS_FILE", str(path))
    monkeypatch.setenv("RAGSERVE_API_KEY_HASHES", f'[{{"id": "from-env", "sha256": "{sha256_hex(READER)}", '
                                                  '"scopes": ["read"]}]')
    keys = keyring_from_settings(Settings(api_keys=[SecretStr("plain-key-0123456789abcdef")]))
    found = [await keys.authenticate(k) for k in ("plain-key-0123456789abcdef", READER, WRITER)]
    assert [(p.id, sorted(p.scopes)) for p in found if p is not None] == [
        ("env-1", ["admin", "read", "write"]), ("from-env", ["read"]), ("from-file", ["write"])]
