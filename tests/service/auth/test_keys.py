from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.auth.keyring import KeyConfigError, load_key_file
from service.auth.keys import matches, new_key, scrypt_hash, sha256_hex
from service.config.keys import ApiKeyEntry, ScryptHash

KEY = "tenant-key-0123456789abcdef"
SHA = hashlib.sha256(KEY.encode()).hexdigest()


def test_sha256_is_the_hex_digest_of_the_key() -> None:
    assert sha256_hex(KEY) == SHA


def test_scrypt_hash_verifies_its_key_and_nothing_else() -> None:
    encoded = scrypt_hash(KEY, log2_n=10)
    parsed = ScryptHash.parse(encoded)
    assert (parsed.log2_n, parsed.r, parsed.p, len(parsed.salt), len(parsed.hash)) == (10, 8, 1, 16, 32)
    assert str(parsed) == encoded
    assert matches(parsed, KEY) and not matches(parsed, KEY + "x") and not matches(parsed, KEY[:-1])
    assert scrypt_hash(KEY, log2_n=10) != encoded  # a new salt each time


@pytest.mark.parametrize("bad", ["scrypt$10$8$1$c2FsdA", "bcrypt$10$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAA",
                                 "scrypt$30$8$1$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43, "scrypt$x$8$1$a$b"])
def test_malformed_scrypt_entries_are_refused(bad: str) -> None:
    with pytest.raises(ValidationError, match="scrypt"):
        ApiKeyEntry(scrypt=bad, scopes=["read"])


def test_new_keys_are_long_random_and_prefixed() -> None:
    keys = {new_key() for _ in range(50)}
    assert len(keys) == 50 and all(k.startswith("rs-") and len(k) == 46 for k in keys)


@pytest.mark.parametrize("entry, message", [
    ({"scopes": ["read"]}, "exactly one of 'sha256' and 'scrypt'"),
    ({"sha256": SHA, "scrypt": scrypt_hash(KEY, log2_n=10), "scopes": ["read"]}, "exactly one"),
    ({"sha256": SHA.upper(), "scopes": ["read"]}, "sha256"),
    ({"sha256": SHA, "scopes": []}, "scopes"),
    ({"sha256": SHA, "scopes": ["root"]}, "scopes"),
    ({"sha256": SHA, "scopes": ["read"], "collections": ["../x"]}, "collections"),
    ({"sha256": SHA, "scopes": ["read"], "tenant": {"field": "a.b", "value": "x"}}, "tenant.field"),
    ({"sha256": SHA, "scopes": ["read"], "tenant": {"field": "org", "value": ""}}, "tenant.value"),
    ({"sha256": SHA, "scopes": ["admin"], "tenant": {"field": "org", "value": "a"}}, "cannot hold 'admin'"),
    ({"sha256": SHA, "scopes": ["read"], "key": KEY}, "key"),
])
def test_bad_entries_are_refused_with_the_reason(entry: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(")):
        ApiKeyEntry.model_validate(entry)


ENTRY = {"id": "kb-reader", "sha256": SHA, "scopes": ["read", "write"], "collections": ["kb"],
         "tenant": {"field": "org", "value": "acme"}}
FILES = {
    "keys.json": json.dumps([ENTRY]),
    "keys.yaml": f"keys:\n  - id: kb-reader\n    sha256: {SHA}\n    scopes: [read, write]\n    collections: [kb]\n"
                 "    tenant: {field: org, value: acme}\n",
    "keys.toml": f'[[keys]]\nid = "kb-reader"\nsha256 = "{SHA}"\nscopes = ["read", "write"]\ncollections = ["kb"]\n'
                 'tenant = {field = "org", value = "acme"}\n',
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_key_files_in_json_yaml_and_toml_read_alike(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(FILES[name])
    assert load_key_file(path) == [ApiKeyEntry.model_validate(ENTRY)]


@pytest.mark.parametrize("name, text, message", [
    ("keys.json", "[{", "does not parse"),
    ("keys.yaml", "keys: [", "does not parse"),
    ("keys.toml", "keys = [", "does not parse"),
    ("keys.ini", "[keys]", "must end in .json, .yaml, .yml or .toml"),
    ("keys.json", json.dumps([ENTRY, {**ENTRY, "scopes": ["write", "sudo"]}]), r"keys\[1\].scopes\[1\]"),
    ("keys.json", json.dumps({"entries": []}), "keys: Input should be a valid list"),
])
def test_a_bad_key_file_is_refused_naming_the_file_and_the_entry(tmp_path: Path, name: str, text: str,
                                                                 message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(KeyConfigError, match=message) as info:
        load_key_file(path)
    assert str(path) in str(info.value)


def test_a_missing_key_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KeyConfigError, match="cannot read the API keys file .*nope.json"):
        load_key_file(tmp_path / "nope.json")
